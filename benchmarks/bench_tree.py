"""Tree rollouts: environment cost per leaf, tree vs independent, and fork latency per env.

    python benchmarks/bench_tree.py [--leaves 4] [--depth 5] [--repeats 3]

Part 1, side by side in one run (interleaved repeat by repeat, so machine noise hits
both): reach ``--leaves`` episodes that all stand at the same point, ``--depth``
actions into the same task, which is where a tree with a branch point at turn
``depth + 1`` splits. Independent: each leaf makes its env, resets it and plays the
``depth`` actions. Tree: one env resets and plays them, then forks ``leaves - 1``
times. Only environment work is timed (no policy); the figure is seconds per leaf
and the independent / tree ratio.

* ALFWorld (a kitchen game, the walkthrough's first commands): the fork is an
  ``os.fork`` of the engine process, so a leaf saves the reset and ``depth`` steps;
* ReTool ``stateful`` (``depth`` cells on the local sandbox): a session fork is an
  ``os.fork`` of the state holder inside its worker (``bench_retool_fork.py`` compares
  it with the replay fallback), so a leaf saves its worker start and the cells;
* ReTool ``stateless``: earlier outputs are already in the context; a fork copies
  the episode and runs nothing.

Part 2: fork latency per environment (median of ``--forks``), each fork closed
right after, at the same depth: guess_number, Search-R1 (bm25 on the shipped
corpus), ReTool stateless and stateful, ALFWorld by process fork and by replay.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agentenvs.envs.registry import make
from agentenvs.envs.rendered_env import RenderedEnv
from agentenvs.envs.retool.protocol import code_action
from agentenvs.envs.retool.sandboxes import close_shared_sandboxes
from agentenvs.rollout.tokenizer import train_chatml_tokenizer

KITCHEN = "pick_and_place_simple-Apple-None-Fridge-kitchen7/trial_simple-apple-fridge"
CELLS = (
    "import sympy",
    "a = sympy.Rational(1, 3)",
    "b = a * 3",
    "c = [i * i for i in range(1000)]",
)


async def act(env: RenderedEnv, text: str) -> None:
    tokens = env.renderer.encode(text)
    if any(text.endswith(stop) for stop in env.stop_condition() if stop):
        await env.step(tokens, extra={"stop_reason": "stop"})
    else:
        await env.step(tokens + env.renderer.end_of_turn_tokens(), extra={"stop_reason": "eos"})


class Scenario:
    """An env factory and the ``depth`` actions that lead to the branch point."""

    def __init__(self, name: str, make_env: Callable[[], RenderedEnv], actions: list[str]):
        self.name, self.make_env, self.actions = name, make_env, actions

    async def advanced(self) -> RenderedEnv:
        env = self.make_env()
        await env.initial_observation()
        for text in self.actions:
            await act(env, text)
        return env


async def timed(work: Callable[[], Awaitable[list[RenderedEnv]]]) -> float:
    started = time.perf_counter()
    envs = await work()
    elapsed = time.perf_counter() - started
    for env in envs:
        await env.close()
    return elapsed


async def independent(scenario: Scenario, leaves: int) -> list[RenderedEnv]:
    return [await scenario.advanced() for _ in range(leaves)]


async def tree(scenario: Scenario, leaves: int) -> list[RenderedEnv]:
    root = await scenario.advanced()
    return [root] + [await root.fork() for _ in range(leaves - 1)]


async def fork_latency(scenario: Scenario, forks: int, replay: bool = False) -> float:
    env = await scenario.advanced()
    times = []
    try:
        for _ in range(forks):
            started = time.perf_counter()
            if replay:
                lease = await env.task._replayed_engine()
                times.append(time.perf_counter() - started)
                lease.release()
                continue
            clone = await env.fork()
            times.append(time.perf_counter() - started)
            await clone.close()
    finally:
        await env.close()
    return statistics.median(times)


def scenarios(tokenizer: Any, depth: int) -> dict[str, Scenario]:
    cells = [code_action(CELLS[i % len(CELLS)]) for i in range(depth)]
    found: dict[str, Scenario] = {
        "guess_number": Scenario(
            "guess_number",
            lambda: make("guess_number", limits={"max_turns": depth + 2}).make_env(0, tokenizer),
            [f"<guess>{i + 1}</guess>" for i in range(depth)],
        ),
        "retool stateless": Scenario(
            "retool stateless",
            lambda: make("retool", max_tool_calls=depth + 2).make_env(0, tokenizer),
            cells,
        ),
        "retool stateful": Scenario(
            "retool stateful",
            lambda: make("retool", execution="stateful", max_tool_calls=depth + 2).make_env(
                0, tokenizer
            ),
            cells,
        ),
    }
    search = make("search_r1", max_turns=depth + 2)
    found["search_r1"] = Scenario(
        "search_r1",
        lambda: search.make_env(0, tokenizer),
        [f"<search> question {i} </search>" for i in range(depth)],
    )
    try:
        alfworld = make("alfworld", data="shipped", workers=1, engines_per_worker=8)
        index = [g.name for g in alfworld.games("train")].index(KITCHEN)
        with open(alfworld.games("train")[index].path) as f:
            walk = json.load(f)["walkthrough"][:-1]  # stop short of winning
        commands = (walk + ["look"] * depth)[:depth]
        found["alfworld"] = Scenario(
            "alfworld",
            lambda: alfworld.make_env(index, tokenizer),
            [f"<action>{c}</action>" for c in commands],
        )
    except Exception as err:
        print(f"ALFWorld skipped: {type(err).__name__}: {err}")
    return found


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--leaves", type=int, default=4)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--forks", type=int, default=20)
    args = parser.parse_args()
    tokenizer = train_chatml_tokenizer()
    found = scenarios(tokenizer, args.depth)
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"\nPart 1: env seconds per leaf, {args.leaves} leaves at depth {args.depth}")
    print("| env | independent s/leaf | tree s/leaf | independent / tree |")
    print("|---|---|---|---|")
    for name in ("alfworld", "retool stateful", "retool stateless"):
        if name not in found:
            continue
        scenario = found[name]
        await tree(scenario, 1)  # warm: workers and engines started, caches filled
        solo, shared = [], []
        for _ in range(args.repeats):
            solo.append(await timed(lambda s=scenario: independent(s, args.leaves)))
            shared.append(await timed(lambda s=scenario: tree(s, args.leaves)))
        a, b = statistics.median(solo) / args.leaves, statistics.median(shared) / args.leaves
        print(f"| {name} | {a:.4f} | {b:.4f} | {a / b:.2f}x |")
    print(f"\nPart 2: fork latency (median of {args.forks}) at depth {args.depth}")
    print("| env | how | median ms |")
    print("|---|---|---|")
    hows = {
        "guess_number": "copy",
        "search_r1": "copy; retriever shared",
        "retool stateless": "copy",
        "retool stateful": "os.fork of the session's state holder",
        "alfworld": "os.fork of the engine process",
    }
    for name, scenario in found.items():
        ms = 1000 * await fork_latency(scenario, args.forks)
        print(f"| {name} | {hows[name]} | {ms:.2f} |")
    if "alfworld" in found:
        ms = 1000 * await fork_latency(found["alfworld"], max(3, args.forks // 4), replay=True)
        print(f"| alfworld | replay fallback (fresh engine, same commands) | {ms:.2f} |")
    await close_shared_sandboxes()
    if "alfworld" in found:
        make("alfworld", data="shipped", workers=1, engines_per_worker=8).shutdown()


if __name__ == "__main__":
    asyncio.run(main())
