"""Build the shipped ALFWorld games from :mod:`agentenvs.envs.alfworld.scenes`.

Run ``python -m agentenvs.envs.alfworld.build_games`` (``--check`` rebuilds into a
temporary folder and compares with the shipped files instead of writing).

For each spec it writes, in ALFWorld's folder layout
(``json_2.1.1/<split>/<task_type>-<Object>-None-<Parent>-<room>/trial_<name>/``):

* ``game.tw-pddl``: the JSON TextWorld's PDDL backend loads, with the installed
  wheel's ``alfred.pddl`` domain, its ``alfred.twl2`` grammar with the goal
  sentence put in place of ``UNKNOWN GOAL`` (what ALFWorld's ``add_task_to_grammar``
  does), the PDDL problem, ``solvable`` and a planner ``walkthrough``;
* ``traj_data.json``: the minimal subset of ALFRED's trajectory file that ALFWorld
  reads (task type and ``pddl_params``, which its handcoded expert needs).

Every game is checked before it is written: Fast Downward's plan must win the game
when replayed through TextWorld, and ALFWorld's handcoded expert is run on it too
(its result is recorded, not required: it is a heuristic).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from agentenvs.envs.alfworld.scenes import GAMES, GameSpec, Room

DATA_DIR = Path(__file__).parent / "data" / "json_2.1.1"

# Receptacles ALFWorld spells as <Parent>_bar_<n>_bar_<Basin> so that its demangler
# prints "sinkbasin 1" rather than "sinkbasinbasin 1".
_BASIN_PARENTS = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}
_LAMPS = {"DeskLamp", "FloorLamp"}


@dataclass
class BuiltGame:
    spec: GameSpec
    folder: Path
    game: dict
    traj_data: dict
    expert_steps: int | None


def receptacle_id(rtype: str, index: int) -> str:
    if rtype in _BASIN_PARENTS:
        return f"{_BASIN_PARENTS[rtype]}_bar_{index}_bar_{rtype}"
    return f"{rtype}_bar_{index}"


def object_id(otype: str, index: int) -> str:
    return f"{otype}_bar_{index}"


def _affordances(otype: str) -> list[str]:
    import alfworld.gen.constants as constants

    props = [] if otype in _LAMPS else ["pickupable"]
    for action, predicate in (
        ("Heatable", "heatable"),
        ("Coolable", "coolable"),
        ("Cleanable", "cleanable"),
        ("Toggleable", "toggleable"),
        ("Sliceable", "sliceable"),
    ):
        if otype in constants.VAL_ACTION_OBJECTS[action]:
            props.append(predicate)
    if otype in constants.MOVABLE_RECEPTACLES:
        props.append("isReceptacleObject")
    return props


def _can_contain(rtype: str, otype: str) -> bool:
    import alfworld.gen.constants as constants

    if otype in _LAMPS:  # lamps stand on furniture the ALFRED tables do not list
        return rtype in {"Desk", "SideTable", "Dresser", "Shelf"}
    return otype in constants.VAL_RECEPTACLE_OBJECTS.get(rtype, set())


def _receptacles(room: Room) -> list[tuple[str, int]]:
    return [(rtype, i) for rtype, n in sorted(room.receptacles.items()) for i in range(1, n + 1)]


def place_objects(spec: GameSpec) -> list[tuple[str, int, str, int]]:
    """(object type, instance, receptacle type, receptacle number) for every object."""
    counts: Counter[str] = Counter()
    placed: list[tuple[str, int, str, int]] = []
    for p in spec.placements:
        if p.recep not in spec.room.receptacles or p.index > spec.room.receptacles[p.recep]:
            raise ValueError(f"{spec.name}: room {spec.room.name} has no {p.recep} {p.index}")
        if not _can_contain(p.recep, p.obj):
            raise ValueError(f"{spec.name}: a {p.recep} cannot hold a {p.obj}")
        counts[p.obj] += 1
        placed.append((p.obj, counts[p.obj], p.recep, p.index))

    from agentenvs.envs.alfworld.scenes import CLUTTER

    reserved = {spec.object_target, spec.toggle_target}
    pool = [o for o in CLUTTER[spec.room.kind] if o not in reserved]
    receptacles = _receptacles(spec.room)
    rng = random.Random(f"agentenvs-alfworld/{spec.name}/{spec.seed}")
    for _ in range(spec.clutter):
        for _attempt in range(100):
            otype = rng.choice(pool)
            fits = [r for r in receptacles if _can_contain(r[0], otype)]
            if fits:
                break
        else:
            raise ValueError(f"{spec.name}: no receptacle in {spec.room.name} holds its clutter")
        rtype, rindex = rng.choice(fits)
        counts[otype] += 1
        placed.append((otype, counts[otype], rtype, rindex))
    return placed


def goal_pddl(spec: GameSpec) -> str:
    """ALFWorld's goal for the task type (it also closes the ``define``)."""
    import alfworld.gen.goal_library as glib

    template = glib.gdict[spec.task_type]["pddl"]
    return template.format(
        obj=spec.object_target, recep=spec.parent_target, toggle=spec.toggle_target, mrecep=""
    ).replace(" # ", " - ")


def goal_sentence(spec: GameSpec) -> str:
    """One of ALFWorld's goal sentences for the task type, filled in as it does."""
    import alfworld.gen.goal_library as glib

    templates = glib.gdict[spec.task_type]["templates"]
    sentence = templates[spec.template % len(templates)]
    return sentence.format(
        obj=spec.object_target.lower(),
        recep=spec.parent_target.lower(),
        toggle=spec.toggle_target.lower(),
        mrecep="",
    )


def problem_pddl(spec: GameSpec) -> str:
    placed = place_objects(spec)
    receptacles = _receptacles(spec.room)
    otypes = sorted({o for o, *_ in placed} | {"Knife", "ButterKnife"})
    rtypes = sorted(set(spec.room.receptacles) | {"SinkBasin", "Microwave", "Fridge"})

    location = {r: f"loc_bar_{i}" for i, r in enumerate(receptacles, start=1)}
    objects = ["agent1 - agent"]
    objects += [f"{t}Type - otype" for t in otypes]
    objects += [f"{t}Type - rtype" for t in rtypes]
    objects += [f"{object_id(o, i)} - object" for o, i, _, _ in placed]
    objects += [f"{receptacle_id(*r)} - receptacle" for r in receptacles]
    objects += ["loc_bar_0 - location"] + [f"{loc} - location" for loc in location.values()]

    init = ["(atLocation agent1 loc_bar_0)"]
    for rtype, i in receptacles:
        rid = receptacle_id(rtype, i)
        init.append(f"(receptacleType {rid} {rtype}Type)")
        init.append(f"(receptacleAtLocation {rid} {location[(rtype, i)]})")
        if _openable(rtype):
            init.append(f"(openable {rid})")
    for otype, i, rtype, ri in placed:
        oid = object_id(otype, i)
        init.append(f"(objectType {oid} {otype}Type)")
        init.append(f"(inReceptacle {oid} {receptacle_id(rtype, ri)})")
        init.append(f"(objectAtLocation {oid} {location[(rtype, ri)]})")
        init.extend(f"({prop} {oid})" for prop in _affordances(otype))
    for rtype in sorted(spec.room.receptacles):
        for otype in otypes:
            if _can_contain(rtype, otype):
                init.append(f"(canContain {rtype}Type {otype}Type)")

    indent = "\n        "
    return (
        f"(define (problem agentenvs_{spec.name.replace('-', '_')})\n"
        "(:domain alfred)\n"
        f"(:objects{indent}{indent.join(objects)}\n)\n"
        f"(:init{indent}{indent.join(init)}\n)\n"
        f"{goal_pddl(spec).strip()}\n"
    )


def _openable(rtype: str) -> bool:
    import alfworld.gen.constants as constants

    return rtype in constants.OPENABLE_CLASS_LIST


def folder_for(spec: GameSpec, root: Path) -> Path:
    parent = spec.parent_target or "None"
    obj = spec.object_target
    if spec.task_type == "look_at_obj_in_light":
        parent = spec.toggle_target
    return (
        root
        / spec.split
        / f"{spec.task_type}-{obj}-None-{parent}-{spec.room.name}"
        / f"trial_{spec.name}"
    )


def traj_data(spec: GameSpec) -> dict:
    return {
        "task_type": spec.task_type,
        "task_id": spec.name,
        "pddl_params": {
            "object_target": spec.object_target,
            "parent_target": spec.parent_target,
            "toggle_target": spec.toggle_target,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"room": spec.room.name, "receptacles": spec.room.size},
        "turk_annotations": {"anns": [{"task_desc": goal_sentence(spec)}]},
        "source": "agentenvs: written for this project (envs/alfworld/scenes.py)",
    }


def build_game(spec: GameSpec, root: Path, expert: bool = True) -> BuiltGame:
    """Write one game and check it is winnable; raises if it is not."""
    import alfworld.info

    domain = Path(alfworld.info.ALFRED_PDDL_PATH).read_text()
    grammar = Path(alfworld.info.ALFRED_TWL2_PATH).read_text()
    if "UNKNOWN GOAL" not in grammar:
        raise RuntimeError("the installed alfred.twl2 has no UNKNOWN GOAL placeholder")
    folder = folder_for(spec, root)
    folder.mkdir(parents=True, exist_ok=True)
    game = {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", goal_sentence(spec)),
        "pddl_problem": problem_pddl(spec),
        "solvable": False,
    }
    data = traj_data(spec)
    game_path = folder / "game.tw-pddl"
    game_path.write_text(json.dumps(game))
    (folder / "traj_data.json").write_text(json.dumps(data, indent=1) + "\n")

    walkthrough = _planner_walkthrough(game_path)
    game["walkthrough"] = walkthrough
    game["solvable"] = True
    game_path.write_text(json.dumps(game))
    expert_steps = _handcoded_expert_steps(game_path) if expert else None
    return BuiltGame(spec, folder, game, data, expert_steps)


def _start(game_path: Path, **infos):
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    request = textworld.EnvInfos(won=True, admissible_commands=True, **infos)
    return textworld.start(
        str(game_path),
        request_infos=request,
        wrappers=[AlfredDemangler(shuffle=False), AlfredInfos],
    )


def _planner_walkthrough(game_path: Path) -> list[str]:
    """Fast Downward's plan from the initial state, replayed to prove it wins."""
    env = _start(game_path)
    try:
        state = env.reset()
        pddl_env = env.unwrapped
        plan = list(pddl_env._pddl_state.replan(pddl_env._entity_infos))
        if not plan:
            raise RuntimeError(f"{game_path}: the planner found no plan")
        won = False
        for command in plan:
            if command not in state["admissible_commands"]:
                raise RuntimeError(f"{game_path}: planned {command!r} is not admissible")
            state, _, _ = env.step(command)
            won = bool(state["won"])
        if not won:
            raise RuntimeError(f"{game_path}: replaying the plan does not win")
        return plan
    finally:
        env.close()


def _handcoded_expert_steps(game_path: Path, max_steps: int = 60) -> int | None:
    """Steps ALFWorld's handcoded expert needs, or None if it does not win."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import (
        AlfredDemangler,
        AlfredExpert,
        AlfredExpertType,
        AlfredInfos,
    )

    request = textworld.EnvInfos(won=True, admissible_commands=True, extras=["expert_plan"])
    env = textworld.start(
        str(game_path),
        request_infos=request,
        wrappers=[
            AlfredDemangler(shuffle=False),
            AlfredInfos,
            AlfredExpert(expert_type=AlfredExpertType.HANDCODED),
        ],
    )
    random.seed(0)  # the expert breaks ties with the global random module
    try:
        state = env.reset()
        for step in range(1, max_steps + 1):
            state, _, _ = env.step(state["extra.expert_plan"][0])
            if state["won"]:
                return step
        return None
    except Exception:
        return None
    finally:
        env.close()


def build_all(
    root: Path, only: set[str] | None = None, verbose: bool = True, expert: bool = True
) -> list[BuiltGame]:
    built = []
    for spec in GAMES:
        if only and spec.name not in only:
            continue
        game = build_game(spec, root, expert)
        built.append(game)
        if verbose:
            steps = game.expert_steps
            expert_result = steps if steps is not None else ("failed" if expert else "not run")
            print(
                f"{spec.split:12s} {spec.name:28s} {spec.room.size:3d} receptacles  "
                f"plan {len(game.game['walkthrough']):2d} steps  handcoded expert: {expert_result}"
            )
    return built


def _same_files(a: Path, b: Path) -> list[str]:
    problems = []
    names_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    names_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    for missing in sorted(names_a ^ names_b):
        problems.append(f"only in one tree: {missing}")
    for name in sorted(names_a & names_b):
        if (a / name).read_bytes() != (b / name).read_bytes():
            problems.append(f"differs: {name}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="output json_2.1.1 folder")
    parser.add_argument("--only", action="append", help="build only this game (repeatable)")
    parser.add_argument(
        "--check", action="store_true", help="rebuild into a temp folder and compare with --out"
    )
    parser.add_argument(
        "--no-expert", action="store_true", help="skip the handcoded-expert run (faster)"
    )
    args = parser.parse_args(argv)
    only = set(args.only) if args.only else None
    expert = not args.no_expert
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            build_all(Path(tmp), only, expert=expert)
            fresh, shipped = Path(tmp), args.out
            if only:  # compare only what was rebuilt
                problems = []
                for spec in GAMES:
                    if spec.name in only:
                        problems += _same_files(folder_for(spec, fresh), folder_for(spec, shipped))
            else:
                problems = _same_files(fresh, shipped)
        for problem in problems:
            print(problem, file=sys.stderr)
        print("shipped games are up to date" if not problems else "shipped games are stale")
        return 1 if problems else 0
    build_all(args.out, only, expert=expert)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
