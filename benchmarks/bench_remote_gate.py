"""What the gate that spans Ray actors costs, measured side by side.

The gate is pushed to the actors (``rollout/collect/executors/remote_gate.py``): a
turn enters its actor's own ``SwapGate`` (no Ray call), and a weight swap closes and
opens every actor's gate with one call each, in parallel. Measured here, on a
two-node loopback cluster with real ``EpisodeHost`` actors:

* per turn: an actor's request loop (a fixed wait standing in for the inference
  server) with and without entering the actor's gate, at several concurrencies;
  ms per turn added and the ratio gated / ungated (order alternating by repeat);
* per swap: the driver's ``ActorsGate`` close (drained at once: nothing in flight)
  plus open, across the executor's actors: ms per swap.

Run: ``python benchmarks/bench_remote_gate.py [--turns 400] [--latency 0.02]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ray_cluster import loopback_cluster

from agentenvs.rollout.collect.executors.actor import EpisodeHost
from agentenvs.rollout.collect.executors.remote_gate import ActorsGate


class TimedHost(EpisodeHost):
    """An episode actor plus a turn loop through its own gate (what its clients enter)."""

    async def turns(self, gated: bool, turns: int, concurrency: int, latency: float) -> float:
        slots = asyncio.Semaphore(concurrency)

        async def turn() -> None:
            async with slots:
                if gated:
                    async with self._gate.request():
                        await asyncio.sleep(latency)
                else:
                    await asyncio.sleep(latency)

        started = time.perf_counter()
        await asyncio.gather(*(turn() for _ in range(turns)))
        return time.perf_counter() - started


class _ReadyHost:
    def __init__(self, handle) -> None:
        self.handle, self.ready, self.node_id = handle, True, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--swaps", type=int, default=50)
    args = parser.parse_args()
    import ray

    with loopback_cluster(worker={"num_cpus": 1}):
        hosts = [ray.remote(TimedHost).options(num_cpus=0).remote() for _ in range(2)]
        ray.get([h.where.remote() for h in hosts])
        print(f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
              f"ray {ray.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
              f"{args.turns} turns of {args.latency * 1000:g} ms, load {os.getloadavg()[0]:.1f}")  # fmt: skip
        print("| concurrency | ms/turn ungated | ms/turn gated | added ms/turn | gated / ungated |")
        print("|---|---|---|---|---|")
        host = hosts[0]
        for concurrency in [int(c) for c in args.concurrency.split(",")]:
            total = {False: 0.0, True: 0.0}
            for repeat in range(args.repeats):
                for gated in (False, True) if repeat % 2 == 0 else (True, False):
                    call = host.turns.remote(gated, args.turns, concurrency, args.latency)
                    total[gated] += ray.get(call)
            scale = 1000 * concurrency / (args.turns * args.repeats)  # ms per turn, per slot
            plain, gated_ms = total[False] * scale, total[True] * scale
            print(f"| {concurrency} | {plain:.3f} | {gated_ms:.3f} | {gated_ms - plain:.3f} | "
                  f"{total[True] / total[False]:.4f}x |")  # fmt: skip

        serials = iter(range(1, 10**9))
        gate = ActorsGate(lambda: [_ReadyHost(h) for h in hosts], serials.__next__)

        async def swaps() -> float:
            started = time.perf_counter()
            for _ in range(args.swaps):
                await gate.close()
                await gate.open(None)
            return (time.perf_counter() - started) / args.swaps

        per_swap = asyncio.run(swaps())
        print(f"\nswap gate close + open across {len(hosts)} actors: {per_swap * 1000:.2f} ms")


if __name__ == "__main__":
    main()
