"""The Ray executor on a real two-node cluster on loopback: the same records as in
process for every flagship environment, placement by resource, a policy left in the
driver, and a clear failure when no node can host the actors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest
import pytest_asyncio
from support import machine_skips
from support.ray_cluster import flagship_builders, loopback_cluster, without_timing
from support.rollout_helpers import CountdownEnv, EchoPolicy, RecordingBuilder
from typer.testing import CliRunner

from agentenvs.rollout.cli import app
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.executors.ray_executor import RayExecutor
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.collect.streaming import collect_streaming
from agentenvs.rollout.collect.tree import BranchSchedule, as_trees
from agentenvs.rollout.policies import make_policy

pytestmark = pytest.mark.services  # starts a real service

in_module_loop = pytest.mark.asyncio(loop_scope="module")

FLAGSHIPS = ["guess_number", "search_r1", "retool", "alfworld"]


@pytest.fixture(scope="module")
def cluster():
    # The head offers one CPU; the worker one CPU and the ALFWorld resource.
    with loopback_cluster(alfworld_node={"num_cpus": 1, "resources": {"alfworld": 1}}) as handle:
        yield handle


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def executor(cluster):
    async with RayExecutor(placement_timeout=120) as shared:
        yield shared


def stored_lines(path) -> list[dict]:
    return [without_timing(json.loads(line)) for line in path.read_text().splitlines()]


@in_module_loop
@pytest.mark.parametrize("env_name", FLAGSHIPS)
async def test_flagship_records_equal_the_in_process_ones_and_pass_check(
    env_name, executor, cluster, tokenizer, tmp_path
):
    stores = {}
    for kind in ("in-process", "ray"):
        builders = flagship_builders(env_name, tokenizer, groups=3, group_size=2)
        store = TrajectoryStore(tmp_path / f"{kind}.jsonl")
        result = await collect(
            builders,
            make_policy("scripted"),
            CollectOptions(concurrency=3, progress=False),
            store=store,
            executor=executor if kind == "ray" else None,
        )
        assert len(result.ok) == 3, [r.error for r in result.failed]
        stores[kind] = store.path
    by_key = {kind: {d["key"]: d for d in stored_lines(p)} for kind, p in stores.items()}
    assert by_key["ray"] == by_key["in-process"]
    placed = {executor.placements[k] for k in by_key["ray"]}
    if env_name == "alfworld":  # only the node offering the ALFWorld resource hosts them
        assert placed == {cluster.node_id("alfworld_node")}
    checked = CliRunner().invoke(app, ["check", str(stores["ray"]), "--tokenizer", "builtin"])
    assert checked.exit_code == 0, checked.stdout


@in_module_loop
async def test_a_policy_in_the_driver_is_called_back_with_each_turn(executor, tokenizer, tmp_path):
    results = {}
    policies = {}
    for kind in ("in-process", "ray"):
        policies[kind] = EchoPolicy()
        builders = flagship_builders("guess_number", tokenizer, groups=2, group_size=2)
        store = TrajectoryStore(tmp_path / f"{kind}.jsonl")
        await collect(
            builders,
            policies[kind],
            CollectOptions(progress=False),
            store=store,
            executor=executor if kind == "ray" else None,
        )
        results[kind] = {d["key"]: d for d in stored_lines(store.path)}
    assert results["ray"] == results["in-process"]
    assert policies["ray"].calls == policies["in-process"].calls > 0  # sampled in the driver
    first = next(iter(results["ray"].values()))["trajectories"][0]["transitions"][0]
    assert first["ac"] == [5, 6] and first["logprobs"] == [-0.5, -0.25]


@in_module_loop
@machine_skips.needs("bubblewrap", "user-namespaces", "debian-python")
async def test_a_harness_episode_runs_in_an_actor_with_its_policy_in_the_driver(executor, tmp_path):
    """Issue 43: HarnessEnv under Ray. mini-swe-agent runs in its jail inside an episode
    actor, its gateway session answered by the scripted policy left in the driver; the
    capture is solved and passes check with every sampled token delivered."""
    from support.gateway_helpers import ScriptPolicy, qwen3
    from support.harness_agent import agent_script
    from support.paths import REPO

    from agentenvs.envs.harness.config import HarnessConfig
    from agentenvs.rollout.inspect.check import check_file

    harnesses = str(REPO / ".harnesses")
    config = HarnessConfig(harness="mini-swe-agent", harnesses_dir=harnesses, agent_timeout=180)
    store = TrajectoryStore(tmp_path / "harness.jsonl")
    result = await collect(
        [config.group_builder(0, 1, qwen3())],
        ScriptPolicy(qwen3(), agent_script),
        CollectOptions(progress=False, retries=0),
        store=store,
        executor=executor,
    )
    (record,) = result.records
    assert record.status == "ok", f"{record.error}\n{record.traceback}"
    assert record.group.total_rewards() == [1.0]
    report = check_file(store.path, tokenizer=qwen3())
    assert report.ok, [f for f in report.findings if f.status == "fail"]
    assert any("delivered 100.0%" in f.detail for f in report.findings)


@in_module_loop
async def test_the_mailbox_answers_in_batches_over_its_shards(executor, tokenizer):
    # One answer call per turn capped a driver at ~470 turns/s: answers ready together
    # go back in one call, and turns spread over two mailbox actors.
    policy = EchoPolicy(delay=0.05)
    builders = flagship_builders("guess_number", tokenizer, groups=8, group_size=4)
    result = await collect(
        builders, policy, CollectOptions(concurrency=8, progress=False), executor=executor
    )
    assert len(result.ok) == 8, [r.error for r in result.failed]
    pump = executor._pumps[id(policy)]
    assert len(pump.mailboxes) == 2 and min(pump.taken) > 0, pump.taken
    assert sum(pump.taken) == policy.calls
    assert pump.answer_calls * 2 < policy.calls, (
        pump.answer_calls,
        policy.calls,
    )  # 1 per turn before


def test_the_mailbox_lives_on_the_drivers_node_so_no_worker_node_takes_it_down(cluster):
    import ray

    from agentenvs.rollout.collect.executors.bridge import mailbox_actor

    here = ray.get_runtime_context().get_node_id()
    mailboxes = [mailbox_actor() for _ in range(6)]  # soft affinity put most elsewhere
    try:
        assert ray.get([m.where.remote() for m in mailboxes]) == [here] * 6
    finally:
        for mailbox in mailboxes:
            ray.kill(mailbox)


@in_module_loop
async def test_tree_rollouts_keep_their_tree_through_the_actors(executor, tokenizer, tmp_path):
    schedule = BranchSchedule(branch_at=(1,), branch_factor=2)
    stores = {}
    for kind in ("in-process", "ray"):
        builders = as_trees(
            flagship_builders("guess_number", tokenizer, groups=2, group_size=1), schedule
        )
        store = TrajectoryStore(tmp_path / f"{kind}.jsonl")
        result = await collect(
            builders,
            make_policy("scripted"),
            CollectOptions(progress=False),
            store=store,
            executor=executor if kind == "ray" else None,
        )
        assert len(result.ok) == 2, [r.error for r in result.failed]
        stores[kind] = {d["key"]: d for d in stored_lines(store.path)}
    for line in stores["ray"].values():
        assert len(line["extra"]["tree"]["leaves"]) == len(line["trajectories"]) == 2
    assert stores["ray"] == stores["in-process"]


@in_module_loop
async def test_streaming_collection_through_the_actors_stores_the_in_process_records(
    executor, tokenizer, tmp_path
):
    stored, handed = {}, {}
    for kind in ("in-process", "ray"):
        store = TrajectoryStore(tmp_path / f"{kind}.jsonl")
        chosen = {"executor": executor} if kind == "ray" else {}
        records, stats = await collect_streaming(flagship_builders("guess_number", tokenizer, groups=4, group_size=2), make_policy("scripted"), CollectOptions(concurrency=2), store=store, **chosen)  # fmt: skip
        assert (stats.handed, stats.failed) == (4, 0)
        handed[kind] = sorted(r.key for r in records)
        stored[kind] = {d["key"]: d for d in stored_lines(store.path)}
    assert handed["ray"] == handed["in-process"] == sorted(stored["ray"])
    assert stored["ray"] == stored["in-process"]
    assert set(stored["ray"]) <= set(executor.placements)  # each group ran in an actor


@in_module_loop
async def test_groups_needing_a_resource_no_node_has_fail_clearly(cluster, tokenizer):
    async with RayExecutor(resources={"tpu_pod": 1}, placement_timeout=2) as executor:
        builders = flagship_builders("guess_number", tokenizer, groups=2, group_size=1)
        result = await collect(
            builders, make_policy("scripted"), CollectOptions(progress=False), executor=executor
        )
    assert [r.status for r in result.records] == ["failed", "failed"]
    error = result.records[0].error
    assert error.startswith("PlacementError: no live Ray node can host")
    assert "tpu_pod=1" in error and "within 2s" in error


def test_cli_joins_a_cluster_by_address(cluster, tmp_path):
    out = tmp_path / "g.jsonl"
    args = ["rollout", "guess_number", "--groups", "3", "--group-size", "2", "--out", str(out),
            "--executor", "ray", "--ray-address", cluster.address, "--json-summary"]  # fmt: skip
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.stdout
    assert json.loads(result.stdout)["ok"] == 3
    assert len(out.read_text().splitlines()) == 3


def test_cli_without_an_address_runs_its_own_ray_and_stops_it(tmp_path):
    out = tmp_path / "g.jsonl"
    env = {**os.environ, "RAY_TMPDIR": tempfile.mkdtemp(prefix="ray", dir="/tmp")}
    command = [sys.executable, "-m", "agentenvs.rollout.cli", "rollout", "guess_number",
               "--groups", "2", "--group-size", "2", "--out", str(out),
               "--executor", "ray", "--json-summary"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1])["ok"] == 2
    leftover = subprocess.run(
        ["pgrep", "-f", env["RAY_TMPDIR"]], capture_output=True, text=True
    ).stdout.split()
    assert leftover == []  # its own Ray processes were stopped with the run


def test_cli_rejects_an_unknown_executor(tmp_path):
    args = ["rollout", "guess_number", "--out", str(tmp_path / "g.jsonl"), "--executor", "dask"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0
    assert "unknown executor 'dask'; choose one of in-process, ray" in result.output


def _breaking_builder(*, transient: bool) -> RecordingBuilder:
    # tests/support is not importable in the actors' processes: ship these test classes
    # by value (a plugin's env would be importable there).
    import ray.cloudpickle
    import support.rollout_helpers

    ray.cloudpickle.register_pickle_by_value(support.rollout_helpers)
    return RecordingBuilder(
        group_size=1,
        env_factory=lambda attempt, index: CountdownEnv(fail_at=1, transient=transient),
    )


@in_module_loop
async def test_an_env_error_in_an_actor_keeps_its_traceback_and_its_retry_rule(executor):
    # Failed groups from Ray actors carry what in-process ones do: the traceback of the
    # raising step, and an env bug is not retried while a transient error is.
    for kind in ("in-process", "ray"):
        result = await collect(
            [_breaking_builder(transient=False), _breaking_builder(transient=True)],
            EchoPolicy(),
            CollectOptions(retries=1, progress=False),
            executor=executor if kind == "ray" else None,
        )
        bug, hiccup = result.records
        assert bug.status == hiccup.status == "failed", kind
        assert (bug.attempts, hiccup.attempts) == (1, 2), kind
        assert "not retried" in bug.error and "CountdownEnv.step" in bug.error, kind
        for record in (bug, hiccup):
            assert record.traceback is not None, kind
            assert "env broke at turn 1" in record.traceback, kind
            assert "rollout_helpers.py" in record.traceback, kind
