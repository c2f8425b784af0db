"""The shipped ALFWorld games: layout, contents, and that the build script reproduces them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import alfworld.info
import pytest

from agentenvs.envs.alfworld import build_games
from agentenvs.envs.alfworld.games import SHIPPED_DATA, data_root, find_games
from agentenvs.envs.alfworld.scenes import GAMES, TASK_TYPES

ALL_SPLITS = ("train", "valid_seen", "valid_unseen")


def shipped():
    return [g for split in ALL_SPLITS for g in find_games(str(SHIPPED_DATA), split)]


def test_at_least_two_games_of_each_task_type_and_big_rooms():
    games = shipped()
    assert len(games) >= 12 and len(games) == len(GAMES)
    train_types = Counter(g.task_type for g in find_games(str(SHIPPED_DATA), "train"))
    assert set(train_types) == set(TASK_TYPES)
    assert all(count >= 2 for count in train_types.values())
    sizes = {spec.name: spec.room.size for spec in GAMES}
    assert sum(size >= 24 for size in sizes.values()) >= 4  # realistic rooms: dozens of receptacles
    assert find_games(str(SHIPPED_DATA), "valid_seen") and find_games(
        str(SHIPPED_DATA), "valid_unseen"
    )


def test_game_files_follow_alfworld():
    domain = Path(alfworld.info.ALFRED_PDDL_PATH).read_text()
    grammar = Path(alfworld.info.ALFRED_TWL2_PATH).read_text()
    for game in shipped():
        data = json.loads(Path(game.path).read_text())
        assert set(data) == {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
        assert data["pddl_domain"] == domain  # the wheel's own domain, verbatim
        assert "UNKNOWN GOAL" not in data["grammar"]
        head, goal_and_tail = grammar.split("UNKNOWN GOAL")
        assert data["grammar"].startswith(head) and data["grammar"].endswith(goal_and_tail)
        assert data["solvable"] is True and data["walkthrough"]
        assert "_bar_" in data["pddl_problem"] and "(:domain alfred)" in data["pddl_problem"]
        traj = json.loads((Path(game.path).parent / "traj_data.json").read_text())
        assert traj["task_type"] == game.task_type
        assert set(traj["pddl_params"]) >= {"object_target", "parent_target", "toggle_target"}
        # ALFWorld's layout: <split>/<task_type>-<obj>-<mrecep>-<parent>-<scene>/<trial>/
        folder = Path(game.path).parent.parent.name
        assert folder.startswith(game.task_type + "-") and len(folder.split("-")) == 5


def test_demangled_names_read_like_alfworld():
    steps = " | ".join(
        g for game in shipped() for g in json.loads(Path(game.path).read_text())["walkthrough"]
    )
    assert "sinkbasin 1" in steps and "_bar_" not in steps
    assert "go to fridge 1" in steps and "desklamp 1" in steps


def test_build_script_reproduces_a_shipped_game(tmp_path):
    spec = next(s for s in GAMES if s.name == "simple-apple-fridge")
    built = build_games.build_game(spec, tmp_path, expert=False)
    shipped_folder = build_games.folder_for(spec, SHIPPED_DATA)
    for name in ("game.tw-pddl", "traj_data.json"):
        assert (built.folder / name).read_bytes() == (shipped_folder / name).read_bytes()


def test_build_refuses_impossible_placements(tmp_path):
    from dataclasses import replace

    from agentenvs.envs.alfworld.scenes import Placement

    spec = next(s for s in GAMES if s.name == "simple-apple-fridge")
    bad = replace(spec, placements=(Placement("Apple", "Toaster"),))
    with pytest.raises(ValueError, match="has no Toaster"):
        build_games.build_game(bad, tmp_path, expert=False)


def test_data_root_prefers_the_real_dataset_when_present(tmp_path, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    assert data_root("auto") == SHIPPED_DATA
    real = (
        tmp_path
        / "json_2.1.1"
        / "valid_seen"
        / "pick_and_place_simple-Pen-None-Desk-301"
        / "trial_T1"
    )
    real.mkdir(parents=True)
    source = next(g for g in shipped() if g.task_type == "pick_and_place_simple")
    (real / "game.tw-pddl").write_text(Path(source.path).read_text())
    (real / "traj_data.json").write_text(json.dumps({"task_type": "pick_and_place_simple"}))
    unsolvable = real.parent.parent / "pick_two_obj_and_place-Pen-None-Desk-301" / "trial_T2"
    unsolvable.mkdir(parents=True)
    (unsolvable / "game.tw-pddl").write_text(json.dumps({"solvable": False}))
    (unsolvable / "traj_data.json").write_text("{}")
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    root = data_root("auto")
    assert root == tmp_path / "json_2.1.1"
    games = find_games(str(root), "eval_in_distribution")
    assert [g.name for g in games] == ["pick_and_place_simple-Pen-None-Desk-301/trial_T1"]
    assert find_games(str(root), "train") == ()
    with pytest.raises(FileNotFoundError):
        data_root(str(tmp_path / "missing"))
