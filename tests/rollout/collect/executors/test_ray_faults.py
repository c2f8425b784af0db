"""Faults on a real two-node Ray cluster: a node hard-killed mid-run, and the driver
SIGKILLed mid-run and run again against the same store and cluster.

Each test gets a cluster of its own: one kills a node, the other kills a driver whose
actors Ray releases only once it notices, and either would disturb the other."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter

import pytest
import pytest_asyncio
from support.paths import SUPPORT
from support.ray_cluster import flagship_builders, in_flight_on, loopback_cluster
from support.rollout_helpers import EchoPolicy

from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.executors.ray_executor import RayExecutor
from agentenvs.rollout.collect.store import TrajectoryStore

pytestmark = pytest.mark.services  # starts a real service


@pytest_asyncio.fixture(scope="function", loop_scope="module")
async def cluster():
    # Both workers offer one "episodes" slot, so the node test's two actors land one on
    # each (not on the head); the head hosts only the drivers.
    slot = {"num_cpus": 1, "resources": {"episodes": 1}}
    with loopback_cluster(doomed=slot, survivor=slot) as handle:
        yield handle


def test_a_sigkilled_driver_reruns_and_resumes_without_loss_or_duplicates(cluster, tmp_path):
    store = tmp_path / "t.jsonl"
    command = [sys.executable, str(SUPPORT / "ray_cluster.py"), cluster.address, str(store), "12"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while not store.exists() or len(store.read_text().splitlines()) < 3:
            assert first.poll() is None, first.stderr.read().decode()[-2000:]
            subprocess.run(["sleep", "0.05"], check=True)
        os.kill(first.pid, signal.SIGKILL)
    finally:
        first.wait()
    kept = len(store.read_text().splitlines())
    assert 3 <= kept < 12, "the driver was not killed mid-run"
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert summary == {"skipped": kept, "ok": 12 - kept, "failed": 0}
    lines = [json.loads(line) for line in store.read_text().splitlines()]
    keys = Counter(line["key"] for line in lines)
    assert len(keys) == 12 and set(keys.values()) == {1}
    assert all(line["status"] == "ok" for line in lines)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_node_killed_mid_run_costs_its_groups_one_attempt_not_the_data(
    cluster, tokenizer, tmp_path
):
    doomed = cluster.node_id("doomed")
    store = TrajectoryStore(tmp_path / "t.jsonl")
    builders = flagship_builders("guess_number", tokenizer, groups=16, group_size=2)
    async with RayExecutor(resources={"episodes": 1}, placement_timeout=30) as executor:
        warm = flagship_builders("guess_number", tokenizer, groups=4, group_size=1)
        await collect(
            warm, EchoPolicy(), CollectOptions(progress=False), executor=executor
        )  # both actors up
        collecting = asyncio.create_task(
            collect(
                builders,
                EchoPolicy(delay=0.1),
                CollectOptions(concurrency=4, progress=False),
                store=store,
                executor=executor,
            )
        )
        while in_flight_on(executor, doomed) == 0:  # wait for work on the doomed node
            assert not collecting.done(), "finished before anything ran on the doomed node"
            await asyncio.sleep(0.05)
        await asyncio.to_thread(cluster.hard_kill, "doomed")
        result = await asyncio.wait_for(collecting, timeout=300)
    assert len(result.ok) == 16 and result.failed == [], [r.error for r in result.failed][:3]
    keys = Counter(r.key for r in store.read())
    assert set(keys.values()) == {1} and len(keys) == 16  # every key once
    retried = [r for r in result.records if r.extra.get("lost_attempts")]
    assert retried, "no group was running on the killed node"
    for record in retried:
        assert record.attempts == 1 + len(record.extra["lost_attempts"])
        assert f"on node {doomed[:12]}" in record.extra["lost_attempts"][0]
        assert executor.placements[record.key] != doomed
