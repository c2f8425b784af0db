"""The Ray executor against the in-process one, measured side by side in one run.

* Episodes/s against concurrent episodes (1 to 256) for a latency-bound policy
  (the scripted oracle behind a 50 ms wait per action, a stand-in for a remote
  sampler): in process, and through Ray with one and with two episode actors on
  a two-node loopback cluster (both nodes share this machine's cores).
* Per-step overhead of the Ray path at concurrency 1: seconds per step through
  Ray over seconds per step in process, same policy.
* What a group's records cost to ship back: pack + pickle + unpickle + unpack of
  a finished group, numpy arrays against the same group as plain lists.

Run: ``python benchmarks/bench_ray.py [--latency 0.05] [--concurrency 1,16,64,256]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pickle
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ray_cluster import flagship_builders, loopback_cluster

from agentenvs.envs.wire import trajectory_to_json
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.executors.ray_executor import RayExecutor
from agentenvs.rollout.collect.executors.wire import pack_group, unpack_group
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.tokenizer import train_chatml_tokenizer


class SlowOracle:
    """The scripted oracle behind a fixed wait per action (pickled by value to actors)."""

    per_env = True

    def __init__(self, latency: float) -> None:
        self.latency = latency

    def __call__(self, env):
        inner = make_policy("scripted")(env)
        latency = self.latency

        async def act(observation, stop, *, max_tokens=None):
            await asyncio.sleep(latency)
            return await inner(observation, stop, max_tokens=max_tokens)

        return act

    def provenance(self) -> dict:
        return {"policy": "slow-oracle", "latency": self.latency}


async def episodes_per_s(builders, policy, concurrency, executor=None) -> tuple[float, float]:
    started = time.perf_counter()
    result = await collect(
        builders, policy, CollectOptions(concurrency=concurrency, progress=False), executor=executor
    )
    elapsed = time.perf_counter() - started
    assert not result.failed, result.failed[0].error
    episodes = sum(len(r.group.trajectories) for r in result.ok)
    steps = sum(len(t.transitions) for r in result.ok for t in r.group.trajectories)
    return episodes / elapsed, elapsed / steps * concurrency


def shipping_cost(builders, repeat: int = 50) -> tuple[float, float, int, int]:
    group = (
        asyncio.run(collect(builders[:1], make_policy("scripted"), CollectOptions(progress=False)))
        .ok[0]
        .group
    )
    as_lists = [trajectory_to_json(t) for t in group.trajectories]

    def timed(fn) -> float:
        started = time.perf_counter()
        for _ in range(repeat):
            fn()
        return (time.perf_counter() - started) / repeat * 1000

    packed_ms = timed(lambda: unpack_group(pickle.loads(pickle.dumps(pack_group(group)))))
    lists_ms = timed(lambda: pickle.loads(pickle.dumps(as_lists)))
    return packed_ms, lists_ms, len(pickle.dumps(pack_group(group))), len(pickle.dumps(as_lists))


async def measure(args, tokenizer, cluster) -> list[str]:
    rows = []
    policy = SlowOracle(args.latency)
    executors = {
        "ray, 1 actor": RayExecutor(num_actors=1, resources={}),
        "ray, 2 actors (2 nodes)": RayExecutor(num_actors=2, resources={}),
    }
    for executor in executors.values():  # warm: actors up, env modules imported
        await episodes_per_s(flagship_builders("guess_number", tokenizer, groups=4, group_size=1),
                             policy, 4, executor)  # fmt: skip
    per_step = {}
    for concurrency in args.concurrency:
        groups = max(2 * concurrency, 8)
        builders = flagship_builders("guess_number", tokenizer, groups=groups, group_size=1)
        cells = []
        rate, step = await episodes_per_s(builders, policy, concurrency)
        cells.append(rate)
        per_step.setdefault(concurrency, {})["in-process"] = step
        for name, executor in executors.items():
            builders = flagship_builders("guess_number", tokenizer, groups=groups, group_size=1)
            rate, step = await episodes_per_s(builders, policy, concurrency, executor)
            cells.append(rate)
            per_step[concurrency][name] = step
        rows.append(f"| {concurrency} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    for executor in executors.values():
        await executor.close()
    low = per_step[min(args.concurrency)]
    ratios = {name: low[name] / low["in-process"] for name in executors}
    rows.append("")
    rows.append(
        f"Per step at concurrency {min(args.concurrency)}: in-process "
        f"{low['in-process'] * 1000:.1f} ms; "
        + "; ".join(f"{name} {low[name] * 1000:.1f} ms ({ratios[name]:.2f}x)" for name in executors)
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", default="1,16,64,256")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    tokenizer = train_chatml_tokenizer()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print("| concurrency | in-process ep/s | ray 1 actor ep/s | ray 2 actors ep/s |")
    print("|---|---|---|---|")
    with loopback_cluster(second={"num_cpus": 1}) as cluster:
        for row in asyncio.run(measure(args, tokenizer, cluster)):
            print(row)
    packed_ms, lists_ms, packed_bytes, list_bytes = shipping_cost(
        flagship_builders("search_r1", tokenizer, groups=1, group_size=8)
    )
    print(f"Shipping one search_r1 group of 8 back (pickle + unpickle): numpy {packed_ms:.2f} ms "
          f"({packed_bytes} B) vs lists {lists_ms:.2f} ms ({list_bytes} B)")  # fmt: skip


if __name__ == "__main__":
    main()
