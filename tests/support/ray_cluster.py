"""A real multi-node Ray cluster on loopback for the Ray executor's tests.

``ray.cluster_utils.Cluster`` starts a head and extra raylets as separate
processes on this machine, each a node with its own resources, so placement,
node death and driver death are real. One cluster serves a whole test module
(it takes about 4 s to start); it is shut down by its own handle, never with
``ray stop`` (which kills every Ray process on the machine, other users' too).

Ray's session files go to a fresh ``RAY_TMPDIR`` per cluster: passing
``temp_dir`` to ``Cluster`` crashes, and a short path keeps Ray's unix sockets
under the 107-byte limit. Every node binds to 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

# Keep every Ray address on loopback: on Linux Ray swaps 127.0.0.1 for the machine's
# outward address unless told this is a single-machine setup (read at import).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
import ray
from ray.cluster_utils import Cluster

LOOPBACK = "127.0.0.1"


@dataclass
class LoopbackCluster:
    cluster: Cluster
    tmpdir: str
    workers: dict[str, Any] = field(default_factory=dict)
    """Worker nodes by the name the test gave them."""

    @property
    def address(self) -> str:
        return self.cluster.address

    def node_id(self, name: str) -> str:
        return self.workers[name].node_id

    def add(self, name: str, **node_args: Any) -> Any:
        node = self.cluster.add_node(node_ip_address=LOOPBACK, **node_args)
        self.cluster.wait_for_nodes()
        self.workers[name] = node
        return node

    def hard_kill(self, name: str) -> None:
        """Kill a worker node's raylet and workers at once, as a machine loss would."""
        self.cluster.remove_node(self.workers.pop(name), allow_graceful=False)


@contextmanager
def loopback_cluster(head_cpus: float = 1, **workers: dict[str, Any]) -> Iterator[LoopbackCluster]:
    """A head plus one worker node per keyword (its ``add_node`` arguments), connected."""
    from ray._private import ray_constants

    if ray_constants.ENABLE_RAY_CLUSTER:  # read when ray was first imported
        raise RuntimeError(
            "ray was imported before RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 was set, so it "
            "would rewrite 127.0.0.1 to the machine's outward address and the driver "
            "would wait forever to join; set it before anything imports ray "
            "(tests/conftest.py does)"
        )
    tmpdir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    previous = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = tmpdir
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": head_cpus,
            "include_dashboard": False,
            "node_ip_address": LOOPBACK,
        },
    )
    handle = LoopbackCluster(cluster, tmpdir)
    try:
        for name, args in workers.items():
            handle.add(name, **args)
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        yield handle
    finally:
        ray.shutdown()
        cluster.shutdown()
        if previous is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = previous
        shutil.rmtree(tmpdir, ignore_errors=True)


# ---- shared by the Ray tests -----------------------------------------------------------
in_module_loop = pytest.mark.asyncio(loop_scope="module")
"""One event loop per module: the executor and its actors outlive a single test."""


@pytest.fixture(scope="module")
def two_node_cluster() -> Iterator[LoopbackCluster]:
    """A head and one plain worker node (one CPU each), for one test module."""
    with loopback_cluster(worker={"num_cpus": 1}) as handle:
        yield handle


def flagship_builders(env_name: str, tokenizer: Any, *, groups: int, group_size: int) -> list:
    """The env's groups as the demo configures it (ALFWorld on its shipped games)."""
    from agentenvs.envs import make
    from agentenvs.rollout.cli.demo import demo_overrides

    config = make(env_name, **demo_overrides(env_name))
    dataset = config.dataset(tokenizer, group_size=group_size, n_groups=groups)
    return [b for i in range(len(dataset)) for b in dataset.get_batch(i)]


TIMING_WORDS = ("time", "elapsed", "latency", "duration", "_ms", "_s")


def without_timing(line: dict[str, Any]) -> dict[str, Any]:
    """A stored record minus what depends on the clock: when it was written, and
    metrics that measure how long something took."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: strip(v)
                for k, v in value.items()
                if not any(word in k.lower() for word in TIMING_WORDS)
            }
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    line = dict(line)
    line.pop("created", None)
    return strip(line)


def in_flight_on(executor: Any, node_id: str) -> int:
    """Groups running right now on the executor's actors on one node."""
    return sum(
        host.in_flight
        for pool in executor._pools.values()
        for host in pool.hosts
        if host.node_id == node_id
    )


def drive(address: str, store_path: str, groups: int) -> None:
    """A driver process for the SIGKILL test: slow guess_number groups, a policy in
    the driver (so it answers every turn), into a store; prints what it did."""
    import asyncio
    import json
    import sys

    from agentenvs.rollout.collect.collector import CollectOptions, collect
    from agentenvs.rollout.collect.executors.ray_executor import RayExecutor
    from agentenvs.rollout.collect.store import TrajectoryStore
    from agentenvs.rollout.tokenizer import train_chatml_tokenizer
    from support.rollout_helpers import EchoPolicy

    builders = flagship_builders(
        "guess_number", train_chatml_tokenizer(), groups=groups, group_size=2
    )
    ray.init(address=address, include_dashboard=False, log_to_driver=False)

    async def go() -> Any:
        async with RayExecutor() as executor:
            return await collect(builders, EchoPolicy(delay=0.1), CollectOptions(concurrency=2, progress=False), store=TrajectoryStore(store_path), executor=executor)  # fmt: skip

    result = asyncio.run(go())
    summary = {"skipped": result.skipped, "ok": len(result.ok), "failed": len(result.failed)}
    sys.stdout.write(json.dumps(summary) + "\n")


if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support.*
    drive(sys.argv[1], sys.argv[2], int(sys.argv[3]))
