"""ReTool stateful sessions in trees: a true fork of the interpreter versus a replay.

    python benchmarks/bench_retool_fork.py [--leaves 4 8] [--depth 5] [--repeats 3] [--forks 20]

Part 1, side by side (interleaved repeat by repeat, so machine noise hits all three):
reach ``leaves`` ReTool ``execution=stateful`` episodes that all stand ``depth`` cells
into the same task, on the local sandbox. Independent: each leaf resets and runs the
cells. Tree, process fork: one episode runs them and forks ``leaves - 1`` times
(``Session.fork`` forks the state holder inside its worker). Tree, replay: the same with
``session_fork='replay'`` (each fork re-runs the kept cells on a worker of its own).
Only environment work is timed (no policy); figures are seconds per leaf and the
independent / tree ratio.

Part 2: fork latency (median of ``--forks``, each fork closed right after) at the same
depth, process fork versus replay, and the cost of closing each.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import statistics
import time
from typing import Any

from bench_tree import CELLS, Scenario, independent, timed, tree

from agentenvs.envs.registry import make
from agentenvs.envs.retool.protocol import code_action
from agentenvs.envs.retool.sandboxes import close_shared_sandboxes
from agentenvs.rollout.tokenizer import train_chatml_tokenizer


def stateful_scenario(tokenizer: Any, depth: int, session_fork: str) -> Scenario:
    config = make(
        "retool",
        execution="stateful",
        max_tool_calls=depth + 2,
        sandbox={"session_fork": session_fork},
    )
    cells = [code_action(CELLS[i % len(CELLS)]) for i in range(depth)]
    return Scenario(
        f"retool stateful, {session_fork}", lambda: config.make_env(0, tokenizer), cells
    )


async def fork_latency(scenario: Scenario, forks: int) -> tuple[float, float, str]:
    """Median seconds to fork and to close a fork, and how the forks were made."""
    env = await scenario.advanced()
    forking, closing, methods = [], [], set()
    try:
        for _ in range(forks):
            started = time.perf_counter()
            clone = await env.fork()
            forking.append(time.perf_counter() - started)
            methods.add(clone.task._session.forked_by)
            started = time.perf_counter()
            await clone.close()
            closing.append(time.perf_counter() - started)
    finally:
        await env.close()
    return statistics.median(forking), statistics.median(closing), "/".join(sorted(methods))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--leaves", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--forks", type=int, default=20)
    args = parser.parse_args()
    tokenizer = train_chatml_tokenizer()
    process = stateful_scenario(tokenizer, args.depth, "process")
    replay = stateful_scenario(tokenizer, args.depth, "replay")
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {now}, "
        f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1/5/15 min) at start"
    )
    for scenario in (process, replay):
        await timed(lambda s=scenario: tree(s, 2))  # warm: workers started, caches filled
    print(f"\nPart 1: env seconds per leaf at depth {args.depth} (median of {args.repeats})")
    print(
        "| leaves | independent | tree, process fork | tree, replay | indep./process | indep./replay |"
    )
    print("|---|---|---|---|---|---|")
    for leaves in args.leaves:
        solo, forked, replayed = [], [], []
        for _ in range(args.repeats):
            solo.append(await timed(lambda n=leaves: independent(process, n)))
            forked.append(await timed(lambda n=leaves: tree(process, n)))
            replayed.append(await timed(lambda n=leaves: tree(replay, n)))
        a, b, c = (statistics.median(x) / leaves for x in (solo, forked, replayed))
        print(f"| {leaves} | {a:.4f} | {b:.4f} | {c:.4f} | {a / b:.2f}x | {a / c:.2f}x |")
    print(f"\nPart 2: fork latency at depth {args.depth} (median of {args.forks})")
    print("| how | made by | fork ms | close ms |")
    print("|---|---|---|---|")
    for label, scenario in (("process fork", process), ("replay", replay)):
        fork_s, close_s, methods = await fork_latency(scenario, args.forks)
        print(f"| {label} | {methods} | {1000 * fork_s:.2f} | {1000 * close_s:.2f} |")
    print(f"\nload {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1/5/15 min) at the end")
    await close_shared_sandboxes()


if __name__ == "__main__":
    asyncio.run(main())
