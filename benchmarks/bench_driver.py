"""How many groups and turns one Ray driver sustains, with the fleet simulated or cheap.

* **groups/s**: the driver side of the Ray executor, for real (``collect``, the
  collector's concurrency bound and stamps, ``RayRunner.run_group``, the real
  ``ActorPool``, unpacking each finished group, the trajectory store with its
  durability), against a simulated fleet: actor handles whose ``run_group`` answers
  in the driver after ``--latency`` seconds with a real packed group (guess_number,
  2 episodes). So the number is what the driver can take, not what this machine's
  two cores can run as episodes. Ray's own cost per actor call (submit, await, the
  result's transfer) is measured apart, on a real actor, as driver CPU per call.
* **turns/s**: the policy mailbox for real: the driver's ``DriverPump`` answering
  ``--fleet`` Ray actors, each running ``--episodes`` concurrent episode loops that
  call ``BridgedPolicy`` as an episode does; the driver's policy answers at once.
  Driver CPU per turn is reported too (what one driver core can take).

Before/after: run it once against the previous tree (``PYTHONPATH`` naming a
checkout whose ``agentenvs`` is the old code) and once against this one; the
script uses only APIs both have.

Run: ``python benchmarks/bench_driver.py [--groups 6000] [--concurrency 2000]
[--latency 0.5] [--turns 20000] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pickle
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import ray
from support.ray_cluster import flagship_builders

import agentenvs.rollout
from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.executors.actor_pool import ActorPool, Placement
from agentenvs.rollout.collect.executors.base import GroupExecutor
from agentenvs.rollout.collect.executors.bridge import DriverPump
from agentenvs.rollout.collect.executors.ray_executor import RayRunner
from agentenvs.rollout.collect.executors.wire import pack_group
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.tokenizer import train_chatml_tokenizer

# ---- groups/s: a simulated fleet behind the real driver side --------------------------
try:  # this tree's actors ship a group as one pickled blob; the previous one as a dict
    from agentenvs.rollout.collect.executors.wire import ship  # noqa: F401

    SHIPS_BLOBS = True
except ImportError:
    SHIPS_BLOBS = False


class _Call:
    """A method's ``.remote``: the answer arrives pickled, as a Ray result does (the
    driver pays its deserialization, and unpacking it may change it in place)."""

    answer_as_blob = False

    def __init__(self, answer: Any, latency: float) -> None:
        self.answer, self.latency = pickle.dumps(answer), latency

    def remote(self, *args: Any) -> Any:
        async def reply() -> Any:
            await asyncio.sleep(self.latency)
            if self.answer_as_blob:
                return self.answer  # what the actor ships now (the runner unpickles it)
            return pickle.loads(self.answer)

        return reply()


class SimulatedActor:
    """Stands in for an ``EpisodeHost`` handle: answers in the driver after a wait."""

    def __init__(self, outcome: dict, latency: float, node_id: str) -> None:
        self.run_group = _Call(outcome, latency)
        self.run_group.answer_as_blob = SHIPS_BLOBS
        self.where = _Call({"node_id": node_id, "pid": 0}, 0.0)


class SimulatedActorClass:
    """What ``ray.remote(EpisodeHost)`` is to the pool: ``.options(...).remote()``."""

    def __init__(self, outcome: dict, latency: float, node_id: str) -> None:
        self.args = (outcome, latency, node_id)

    def options(self, **_: Any) -> SimulatedActorClass:
        return self

    def remote(self) -> SimulatedActor:
        return SimulatedActor(*self.args)


class SimulatedFleet(GroupExecutor):
    """The Ray executor's runner and pool, with simulated actors (no object store)."""

    name = "ray"

    def __init__(self, outcome: dict, latency: float, actors: int) -> None:
        node_id = ray.get_runtime_context().get_node_id()
        self.pool = ActorPool(SimulatedActorClass(outcome, latency, node_id), Placement(),
                              actors, 60.0)  # fmt: skip
        self.placements: dict[str, str] = {}
        self.lost_retries = 2

    def gate_for(self, policy: Any) -> None:
        return None

    def policy_ref(self, policy: Any) -> None:
        return None

    async def start(self, policy: Any, builders: Any) -> RayRunner:
        return RayRunner(self, self.pool, None, policy, builders)  # type: ignore[arg-type]


async def groups_per_s(args: argparse.Namespace, tokenizer: Any, folder: Path) -> dict:
    one = flagship_builders("guess_number", tokenizer, groups=1, group_size=2)
    record = (await collect(one, make_policy("scripted"), CollectOptions(progress=False))).ok[0]
    outcome = {"group": pack_group(record.group), "status": "ok", "error": None,
               "traceback": None, "attempts": 1, "policy": None, "node_id": "sim", "pid": 0,
               "collected": record.collected}  # fmt: skip
    builders = flagship_builders("guess_number", tokenizer, groups=args.groups, group_size=2)
    fleet = SimulatedFleet(outcome, args.latency, args.actors)
    store = TimedStore(folder / "driver.jsonl")
    started, cpu = time.perf_counter(), time.process_time()
    result = await collect(builders, make_policy("scripted"), CollectOptions(concurrency=args.concurrency, progress=False), store=store, executor=fleet)  # fmt: skip
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert len(result.ok) == args.groups, result.failed[:1]
    assert len(list(store.read())) == args.groups
    quarter, three = store.acked[len(store.acked) // 4], store.acked[3 * len(store.acked) // 4]
    return {"groups/s": args.groups / wall, "cpu_ms_per_group": cpu / args.groups * 1000,
            "wall_s": wall, "sustained": (len(store.acked) // 2) / (three - quarter)}  # fmt: skip


class TimedStore(TrajectoryStore):
    """When each group was acknowledged as stored (the middle half: the sustained rate)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.acked: list[float] = []

    def append(self, record: Any) -> None:  # the driver before group commit
        super().append(record)
        self.acked.append(time.perf_counter())

    async def commit(self, record: Any) -> None:  # and after
        await super().commit(record)
        self.acked.append(time.perf_counter())


@ray.remote(num_cpus=0)
class Echo:
    def __init__(self, payload: Any) -> None:
        self.payload = pickle.dumps(payload) if SHIPS_BLOBS else payload

    async def call(self) -> Any:
        return self.payload


async def ray_call_cost(calls: int, payload: Any) -> float:
    """Driver CPU (ms) per actor call returning a group as this tree's actors ship it
    (and unpickling it, for a blob), 200 calls in flight at once."""
    actor = Echo.remote(payload)
    await actor.call.remote()
    cpu = time.process_time()
    for start in range(0, calls, 200):
        outs = await asyncio.gather(*(actor.call.remote() for _ in range(min(200, calls - start))))
        if SHIPS_BLOBS:
            [pickle.loads(out) for out in outs]
    cost = (time.process_time() - cpu) / calls * 1000
    ray.kill(actor)
    return cost


# ---- turns/s: the real mailbox, a fleet of Ray actors calling it ----------------------
class InstantPolicy:
    async def __call__(self, observation, stop, *, max_tokens=None) -> TokensWithLogprobs:
        return TokensWithLogprobs([5, 6], [-0.5, -0.25], "stop")


@ray.remote(num_cpus=0)
class TurnFleet:
    """``episodes`` concurrent loops, each sampling ``turns`` times through the bridge."""

    async def run(self, mailbox: Any, episodes: int, turns: int) -> int:
        from agentenvs.rollout.collect.executors.bridge import BridgedPolicy

        policy = BridgedPolicy(mailbox)
        observation = list(range(100))

        async def episode() -> None:
            for _ in range(turns):
                await policy(observation, "stop", max_tokens=8)

        await asyncio.gather(*(episode() for _ in range(episodes)))
        return episodes * turns

    async def ready(self) -> bool:
        return True


async def turns_per_s(args: argparse.Namespace) -> dict:
    pump = DriverPump(InstantPolicy())
    pump.start()
    fleet = [TurnFleet.remote() for _ in range(args.fleet)]
    await asyncio.gather(*(f.ready.remote() for f in fleet))
    per_loop = max(1, args.turns // (args.fleet * args.episodes))
    await asyncio.gather(*(f.run.remote(pump.mailbox, 4, 2) for f in fleet))  # warm
    started, cpu = time.perf_counter(), time.process_time()
    done = await asyncio.gather(*(f.run.remote(pump.mailbox, args.episodes, per_loop)
                                  for f in fleet))  # fmt: skip
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    turns = sum(done)
    shards = len(getattr(pump, "mailboxes", [pump.mailbox]))
    calls = getattr(pump, "answer_calls", None)
    await pump.close()
    for actor in fleet:
        ray.kill(actor)
    return {"turns/s": turns / wall, "driver_cpu_us_per_turn": cpu / turns * 1e6,
            "shards": shards, "turns_per_answer_call": (turns / calls) if calls else 1.0}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=6000)
    parser.add_argument("--concurrency", type=int, default=2000)
    parser.add_argument("--actors", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--turns", type=int, default=20000)
    parser.add_argument("--fleet", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--dir", default=None, help="where the store goes (default: a temp dir)")
    parser.add_argument("--skip-turns", action="store_true")
    args = parser.parse_args()
    print(f"code: {Path(agentenvs.rollout.__file__).parents[1]}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; load: {os.getloadavg()}")  # fmt: skip
    tokenizer = train_chatml_tokenizer()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory(dir=args.dir) as folder:
            groups = asyncio.run(groups_per_s(args, tokenizer, Path(folder)))
        print(f"groups: {args.groups} x 2 episodes, concurrency {args.concurrency}, "
              f"{args.actors} simulated actors, {args.latency:g} s per group: "
              f"{groups['groups/s']:.0f} groups/s overall, {groups['sustained']:.0f} sustained "
              f"(middle half), driver CPU {groups['cpu_ms_per_group']:.2f} "
              f"ms/group ({groups['wall_s']:.1f} s)")  # fmt: skip
        one = flagship_builders("guess_number", tokenizer, groups=1, group_size=2)
        group = (
            asyncio.run(collect(one, make_policy("scripted"), CollectOptions(progress=False)))
            .ok[0]
            .group
        )
        cost = asyncio.run(ray_call_cost(2000, pack_group(group)))
        print(f"one real Ray actor call returning that group: driver CPU {cost:.3f} ms/call")
        if not args.skip_turns:
            turns = asyncio.run(turns_per_s(args))
            print(f"mailbox: {args.fleet} fleet actors x {args.episodes} episodes, "
                  f"{turns['shards']} shard(s): {turns['turns/s']:.0f} turns/s, driver CPU "
                  f"{turns['driver_cpu_us_per_turn']:.0f} us/turn, "
                  f"{turns['turns_per_answer_call']:.1f} turns per answer call")  # fmt: skip
    finally:
        ray.shutdown()
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
