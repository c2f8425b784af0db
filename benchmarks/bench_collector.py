"""Collector throughput: what the concurrency bound buys, and what durability costs.

Measured side by side in one run on guess_number groups:

* a policy that waits ``--latency`` seconds per action (a stand-in for a remote
  sampler's round trip) at concurrency 1, 8 and 32: the speed-up should approach
  the bound while the collector's own overhead is small;
* the scripted oracle with zero latency, with and without the store: the cost of
  one fsync-ed JSONL line per group against the pure rollout work.

Run: ``python benchmarks/bench_collector.py [--groups 64] [--group-size 4] [--latency 0.02]``.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import tempfile
import time
from pathlib import Path

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.rollout.collect.collector import CollectOptions, collect, summarize
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.tokenizer import train_chatml_tokenizer


class RemoteLike:
    """The scripted oracle behind a fixed per-action delay."""

    per_env = True

    def __init__(self, latency: float) -> None:
        self.inner = make_policy("scripted")
        self.latency = latency

    def __call__(self, env):
        policy = self.inner(env)

        async def act(observation, stop, *, max_tokens=None):
            await asyncio.sleep(self.latency)
            return await policy(observation, stop, max_tokens=max_tokens)

        return act


def builders(tokenizer, groups: int, group_size: int):
    config = GuessNumberConfig(tasks=groups)
    return list(config.dataset(tokenizer, group_size=group_size).builders)


def timed(coro_factory) -> tuple[float, dict]:
    start = time.perf_counter()
    result = asyncio.run(coro_factory())
    return time.perf_counter() - start, summarize(result.records)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.02)
    args = parser.parse_args()
    tokenizer = train_chatml_tokenizer()
    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}")
    print(f"{args.groups} groups x {args.group_size} episodes of guess_number")

    print(f"\npolicy latency {args.latency * 1000:.0f} ms per action")
    base = None
    for concurrency in (1, 8, 32):
        seconds, summary = timed(
            lambda c=concurrency: collect(
                builders(tokenizer, args.groups, args.group_size),
                RemoteLike(args.latency),
                CollectOptions(concurrency=c, progress=False),
            )
        )
        base = base or seconds
        print(
            f"  concurrency {concurrency:>2}: {seconds:6.2f} s, "
            f"{args.groups / seconds:7.1f} groups/s, speed-up {base / seconds:5.1f}x "
            f"(turns {summary['mean_turns']:.2f}, failed {summary['failed']})"
        )

    print("\nzero-latency scripted oracle, concurrency 8")
    with tempfile.TemporaryDirectory() as tmp:
        plain, _ = timed(
            lambda: collect(
                builders(tokenizer, args.groups, args.group_size),
                make_policy("scripted"),
                CollectOptions(progress=False),
            )
        )
        stored, _ = timed(
            lambda: collect(
                builders(tokenizer, args.groups, args.group_size),
                make_policy("scripted"),
                CollectOptions(progress=False),
                store=TrajectoryStore(Path(tmp) / "bench.jsonl"),
            )
        )
        size = (Path(tmp) / "bench.jsonl").stat().st_size
    print(f"  without store: {plain:6.3f} s ({args.groups / plain:7.1f} groups/s)")
    print(
        f"  with store:    {stored:6.3f} s ({args.groups / stored:7.1f} groups/s), "
        f"{size / args.groups / 1024:.1f} KiB per group line; "
        f"store costs {(stored - plain) / args.groups * 1000:.2f} ms per group"
    )


if __name__ == "__main__":
    main()
