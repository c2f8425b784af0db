"""The actor pool on a real loopback cluster as it changes: actors spread one per node,
a node added mid-run gets a host, and a node killed mid-run costs each of its groups one
attempt even when several actors shared it.

One cluster serves the module, in this order: the spread test uses every node, the
growth test adds one, the death test kills one (nothing after it needs it).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
import pytest_asyncio
from support.ray_cluster import flagship_builders, in_flight_on, loopback_cluster
from support.rollout_helpers import EchoPolicy

from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.executors.ray_executor import RayExecutor
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import make_policy

pytestmark = [pytest.mark.services, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster():
    # "slots": the death test's actors, three on the doomed node and one on the
    # survivor; "grow": the growth test's, one now and one on the node it adds.
    doomed = {"num_cpus": 1, "resources": {"slots": 3}}
    survivor = {"num_cpus": 1, "resources": {"slots": 1, "grow": 1}}
    with loopback_cluster(doomed=doomed, survivor=survivor) as handle:
        yield handle


async def all_ready(executor: RayExecutor, count: int, timeout: float = 120.0) -> list:
    """The executor's hosts once ``count`` of them are up (placed and answering)."""
    deadline = time.monotonic() + timeout
    while True:
        hosts = [h for pool in executor._pools.values() for h in pool.hosts if h.ready]
        if len(hosts) >= count or time.monotonic() > deadline:
            return hosts
        await asyncio.sleep(0.1)


async def test_default_placement_puts_one_actor_on_every_node(cluster, tokenizer):
    import ray

    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(nodes) == 3
    seen = []
    for _ in range(4):  # fresh executors: SPREAD alone packed 3 actors onto 1-2 nodes
        async with RayExecutor(resources={}, placement_timeout=60) as executor:
            builders = flagship_builders("guess_number", tokenizer, groups=3, group_size=1)
            result = await collect(builders, make_policy("scripted"), CollectOptions(progress=False), executor=executor)  # fmt: skip
            assert len(result.ok) == 3
            hosts = await all_ready(executor, 3)
            seen.append(Counter(h.node_id for h in hosts))
    assert all(set(count) == nodes and set(count.values()) == {1} for count in seen), seen


async def test_a_node_added_mid_run_gets_a_host_that_runs_groups(cluster, tokenizer):
    async with RayExecutor(resources={"grow": 1}, placement_timeout=60) as executor:
        warm = flagship_builders("guess_number", tokenizer, groups=2, group_size=1)
        await collect(
            warm, make_policy("scripted"), CollectOptions(progress=False), executor=executor
        )
        assert len(await all_ready(executor, 1)) == 1
        cluster.add("late", num_cpus=1, resources={"grow": 1})  # signals: the main thread
        late = cluster.node_id("late")
        builders = flagship_builders("guess_number", tokenizer, groups=24, group_size=1)
        result = await collect(builders, EchoPolicy(delay=0.05), CollectOptions(concurrency=6, progress=False), executor=executor)  # fmt: skip
        assert len(result.ok) == 24
        hosts = await all_ready(executor, 2, timeout=30)
        assert late in {h.node_id for h in hosts}, "the pool never placed an actor on the new node"
        assert late in set(executor.placements.values()), "no group ran on the new node"
    await asyncio.to_thread(cluster.hard_kill, "late")  # the next test's cluster as it began


async def test_co_located_actors_on_a_killed_node_cost_each_group_one_attempt(
    cluster, tokenizer, tmp_path
):
    doomed = cluster.node_id("doomed")
    store = TrajectoryStore(tmp_path / "t.jsonl")
    # lost_retries=1: a group may lose one attempt; a retry sent to another actor of the
    # dead node loses the second and fails it.
    async with RayExecutor(resources={"slots": 1}, placement_timeout=60, lost_retries=1) as ex:
        warm = flagship_builders("guess_number", tokenizer, groups=4, group_size=1)
        await collect(warm, make_policy("scripted"), CollectOptions(progress=False), executor=ex)
        hosts = await all_ready(ex, 4)
        assert Counter(h.node_id for h in hosts)[doomed] == 3
        builders = flagship_builders("guess_number", tokenizer, groups=24, group_size=2)
        collecting = asyncio.create_task(
            collect(builders, EchoPolicy(delay=0.1), CollectOptions(concurrency=8, progress=False), store=store, executor=ex)
        )  # fmt: skip
        while in_flight_on(ex, doomed) < 4:  # several groups on the doomed node's actors
            assert not collecting.done(), "finished before the doomed node was busy"
            await asyncio.sleep(0.02)
        await asyncio.to_thread(cluster.hard_kill, "doomed")
        result = await asyncio.wait_for(collecting, timeout=300)
    assert result.failed == [], [r.error for r in result.failed][:3]
    assert len(result.ok) == 24
    keys = Counter(r.key for r in store.read())
    assert len(keys) == 24 and set(keys.values()) == {1}
    retried = [r for r in result.records if r.extra.get("lost_attempts")]
    assert len(retried) >= 4, "fewer groups were lost than were running on the node"
    for record in retried:
        assert len(record.extra["lost_attempts"]) == 1, record.extra["lost_attempts"]
        assert ex.placements[record.key] != doomed
