"""Every group handed to the collector ends as exactly one stored record, whatever fails.

A property test (issue #46, item 1): faults are drawn at random and injected at every
await point of an episode (making the envs, the first observation, each policy call,
each step and its call to a real TCP server, the group rewards, the cleanup). A fault
is an exception (a bug, or a transient error), a cancellation the collector did not
ask for (an awaited task cancelled by someone else: what an SDK's cancel scope raises
into the episode), a hang (the group timeout ends it), or a killed server (the TCP
server the steps talk to is shut down, so every later call to it fails). Whatever is
drawn, the collection returns, and the store holds one record per group: ``ok``, or
``failed`` with the error of each attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.rollout_helpers import CountdownEnv, EchoPolicy, EnvHiccup

from agentenvs.envs.types import Env, EnvGroupBuilder, GroupDescription, Metrics, Trajectory
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.executors import GroupExecutor, GroupRunner
from agentenvs.rollout.collect.store import TrajectoryStore, read_store

FAULTS = ("error", "transient", "cancel", "hang", "kill")


class LineServer:
    """A real TCP server on 127.0.0.1 that answers each line with ``ok``; killed on
    request (its socket closed and every open connection cut)."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.port = 0
        self.writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        try:
            while await reader.readline():
                writer.write(b"ok\n")
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            self.writers.discard(writer)
            writer.close()

    async def ask(self) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(b"step\n")
            await writer.drain()
            if await reader.readline() != b"ok\n":
                raise ConnectionError("the server closed the connection")
        finally:
            writer.close()

    async def kill(self) -> None:
        if self.server is not None:
            self.server.close()
            for writer in list(self.writers):
                writer.transport.abort()
            await self.server.wait_closed()
            self.server = None


@dataclass
class Faults:
    """The faults of one group: the n-th await point it reaches (counting across
    attempts) raises, hangs or kills the server as drawn."""

    drawn: dict[int, str]
    server: LineServer
    reached: int = 0

    async def point(self, where: str) -> None:
        n, self.reached = self.reached, self.reached + 1
        await asyncio.sleep(0)
        fault = self.drawn.get(n)
        if fault == "error":
            raise RuntimeError(f"injected at {where}")
        if fault == "transient":
            raise EnvHiccup(f"injected at {where}")
        if fault == "cancel":  # an awaited task someone else cancelled
            inner = asyncio.create_task(asyncio.sleep(3600))
            inner.cancel()
            await inner
        if fault == "hang":
            await asyncio.Event().wait()
        if fault == "kill":
            await self.server.kill()


class FaultyEnv(CountdownEnv):
    def __init__(self, faults: Faults) -> None:
        super().__init__(turns=2)
        self.faults = faults

    async def initial_observation(self):
        await self.faults.point("initial_observation")
        return await super().initial_observation()

    async def step(self, action, *, extra=None):
        await self.faults.point("step")
        await self.faults.server.ask()  # a tool call to a server that may be dead
        return await super().step(action, extra=extra)


class FaultyPolicy:
    """A shared policy whose calls fault where their group's plan says."""

    def __init__(self, plans: dict[str, Faults]) -> None:
        self.plans = plans
        self.echo = EchoPolicy()

    async def __call__(self, observation, stop, *, max_tokens=None):
        from agentenvs.rollout.collect.rollouts import current_group_key

        await self.plans[str(current_group_key.get())].point("policy")
        return await self.echo(observation, stop, max_tokens=max_tokens)


@dataclass
class FaultyBuilder(EnvGroupBuilder):
    key: str
    faults: Faults
    group_size: int = 2
    cleanups: int = 0
    attempts: int = 0
    envs: list[Env] = field(default_factory=list)

    async def make_envs(self) -> Sequence[Env]:
        self.attempts += 1
        await self.faults.point("make_envs")
        return [FaultyEnv(self.faults) for _ in range(self.group_size)]

    async def compute_group_rewards(
        self, trajectories: list[Trajectory], envs: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        await self.faults.point("compute_group_rewards")
        return [(0.0, {}) for _ in trajectories]

    async def cleanup(self) -> None:
        self.cleanups += 1
        await self.faults.point("cleanup")

    def describe(self) -> GroupDescription:
        return GroupDescription(task_id=self.key, group_size=self.group_size)


group_faults = st.dictionaries(st.integers(0, 24), st.sampled_from(FAULTS), max_size=4)


RANDOM_FAULTS = CollectOptions(concurrency=3, retries=1, group_timeout=0.5, progress=False)


async def _collect_with_faults(
    drawn: list[dict[int, str]], sizes: list[int], path, options: CollectOptions = RANDOM_FAULTS
) -> tuple:
    server = LineServer()
    await server.start()
    plans = {f"g{i}": Faults(faults, server) for i, faults in enumerate(drawn)}
    builders = [
        FaultyBuilder(key, plan, group_size=size)
        for (key, plan), size in zip(plans.items(), sizes, strict=True)
    ]
    store = TrajectoryStore(path)
    try:
        result = await asyncio.wait_for(  # a hang here is a failure, not a slow test
            collect(builders, FaultyPolicy(plans), options, store=store, keys=list(plans)),
            timeout=120,
        )
    finally:
        await server.kill()
    return result, builders


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    drawn=st.lists(group_faults, min_size=1, max_size=4),
    sizes=st.lists(st.integers(1, 3), min_size=4, max_size=4),
)
def test_every_group_ends_as_exactly_one_record_whatever_faults(drawn, sizes, tmp_path_factory):
    path = tmp_path_factory.mktemp("faults") / "store.jsonl"
    result, builders = asyncio.run(_collect_with_faults(drawn, sizes[: len(drawn)], path))
    keys = [b.key for b in builders]
    stored = read_store(path).records
    assert sorted(r.key for r in stored) == sorted(keys)  # one record per group, none twice
    assert sorted(r.key for r in result.records) == sorted(keys)
    for record in stored:
        assert record.status in ("ok", "failed")
        if record.status == "failed":
            assert record.error and record.error.startswith("failed after"), record.error
        else:
            assert record.group is not None and record.error is None
    for builder in builders:  # every attempt's envs were cleaned up
        assert builder.cleanups == builder.attempts


def test_a_cancellation_raised_inside_an_episode_is_that_groups_error(tmp_path):
    """The MCP case of issue #46: a client library's cancel scope raises
    ``CancelledError`` into the episode although nobody cancelled the collection."""
    drawn = [{2: "cancel"}, {}]  # g0: its first policy call is cancelled from inside
    result, _ = asyncio.run(_collect_with_faults(drawn, [1, 1], tmp_path / "s.jsonl"))
    by_key = {r.key: r for r in result.records}
    assert by_key["g1"].status == "ok"
    assert by_key["g0"].status == "ok" and by_key["g0"].attempts == 2  # retried, then fine
    assert sorted(r.key for r in read_store(tmp_path / "s.jsonl").records) == ["g0", "g1"]


def test_a_cancelled_episode_stops_its_siblings(tmp_path):
    """One episode of a group is cancelled from inside while its sibling waits forever
    (no group timeout): the group fails at once, its sibling stopped, instead of the
    cancelled child being ignored and the run hanging on the sibling."""
    drawn = [{1: "cancel", 2: "hang"}]  # the first env's first observation; the second's
    options = CollectOptions(retries=0, progress=False)
    result, _ = asyncio.run(_collect_with_faults(drawn, [2], tmp_path / "s.jsonl", options))
    (record,) = result.records
    assert record.status == "failed" and "CancelledInside" in record.error, record.error


class CancelledRunner(GroupRunner):
    """An executor's runner whose wait for a group ends cancelled from inside (a
    worker's handle cancelled elsewhere): what the collector does with whatever escapes
    an executor."""

    async def run_group(self, builder, key, *, retries, group_timeout):
        inner = asyncio.create_task(asyncio.sleep(3600))
        inner.cancel()
        await inner


class CancelledExecutor(GroupExecutor):
    async def start(self, policy, builders) -> GroupRunner:
        return CancelledRunner()


def test_a_cancellation_escaping_an_executor_is_the_groups_failed_record(tmp_path):
    builders = [FaultyBuilder(f"g{i}", Faults({}, LineServer())) for i in range(3)]
    store = TrajectoryStore(tmp_path / "x.jsonl")
    result = asyncio.run(
        collect(builders, EchoPolicy(), RANDOM_FAULTS, store=store, executor=CancelledExecutor())
    )
    assert sorted(r.key for r in read_store(store.path).records) == ["0:g0", "1:g1", "2:g2"]
    assert all("CancelledError" in r.error for r in result.failed) and len(result.failed) == 3


def test_cancelling_the_collection_itself_still_stops_it(tmp_path):
    """The collector's own cancellation (Ctrl-C, a caller's timeout) is not swallowed
    as a group error: it stops the run."""

    async def main() -> None:
        drawn = [{0: "hang"}, {0: "hang"}]
        task = asyncio.create_task(_collect_with_faults(drawn, [1, 1], tmp_path / "c.jsonl"))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
