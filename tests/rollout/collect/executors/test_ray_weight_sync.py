"""A weight sync in the driver reaches the clients Ray actors built for themselves.

With ``policy_spec`` every actor builds its own OpenAI-compatible client and keeps
it across runs. Here, against the suite's real vLLM server and a real two-node
loopback cluster: a first collection samples the base model; the driver's
:class:`WeightSync` loads a new LoRA adapter and verifies it; a second collection
through the same executor (its actors and their cached clients still alive) must
sample from the adapter and stamp its verified identity on every turn (the second
collection is a streaming one, as an asynchronous trainer runs it). The
sampled tokens' logprobs are checked against the adapter's own forward pass, and
shown to differ from the base model's, so a stale client cannot pass.
"""

from __future__ import annotations

import pytest
import pytest_asyncio
from support.ray_cluster import in_module_loop, two_node_cluster  # noqa: F401
from support.ray_weight_sync import _max_diff, _turns, driver_sync
from support.vllm_server import restore_base_weights, vllm_server  # noqa: F401  (the session fixture)
from support.weight_updates import _adapter, _group_builders, _load

from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.executors import PolicySpec
from agentenvs.rollout.collect.executors.ray_executor import RayExecutor
from agentenvs.rollout.collect.streaming import Staleness, collect_streaming
from agentenvs.rollout.weights.probe import TOLERANCE, torch_reference
from agentenvs.rollout.weights.stamps import VERSION_LOG

pytestmark = pytest.mark.services  # starts a real service


@pytest_asyncio.fixture(loop_scope="module")
async def synced(vllm_server, tokenizer):  # noqa: F811
    async with driver_sync(vllm_server, tokenizer) as pair:
        yield pair


def _two_groups(tokenizer) -> list:
    return [*_group_builders(tokenizer), *_group_builders(tokenizer)]


def _hosts(executor) -> list:
    return [host.handle for pool in executor._pools.values() for host in pool.hosts]


@in_module_loop
async def test_actors_sample_the_synced_adapter_and_stamp_its_identity(
    two_node_cluster,  # noqa: F811
    synced,
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    sync, spec = synced
    async with RayExecutor(policy_spec=spec, placement_timeout=120) as executor:
        before = await collect(_two_groups(tokenizer), sync.policy, CollectOptions(progress=False), executor=executor, keys=["a0", "a1"])  # fmt: skip
        assert len(before.ok) == 2, [r.error for r in before.failed]
        assert {tr.logs[VERSION_LOG] for tr in _turns(before.ok)} == {0}
        hosts = _hosts(executor)  # the actors, with the clients they built

        adapted = _adapter(vllm_server.model_dir, tmp_path / "lora1", seed=3)
        report = await sync.push_lora(tmp_path / "lora1", torch_reference(adapted))
        identity = report.identity
        assert identity.verified and identity.version == 1

        # As an asynchronous trainer collects: streamed, nothing older than the sync kept.
        after, stats = await collect_streaming(_two_groups(tokenizer), sync.policy, keys=["b0", "b1"], executor=executor, staleness=Staleness(max_staleness=0, on_stale="drop"))  # fmt: skip
        assert _hosts(executor) == hosts  # the same actors: their cached clients were updated
    assert (stats.handed, stats.dropped_stale, stats.failed) == (2, 0, 0)
    turns = _turns(after)
    assert turns and all(tr.logs[VERSION_LOG] == 1 for tr in turns)
    assert all(tr.logs["policy/weights"] == identity.label() for tr in turns)
    for record in after:  # reported by the actors' own clients
        weights = record.provenance["policy"]["weights"]
        assert weights["name"] == identity.name and weights["verified"] is True
        assert record.provenance["policy"]["weights_version"] == 1
    adapter_ref = torch_reference(adapted)
    base_ref = torch_reference(_load(vllm_server.model_dir))
    assert max(_max_diff(adapter_ref, tr) for tr in turns) < TOLERANCE["float32"]
    assert max(_max_diff(base_ref, tr) for tr in turns) > 10 * TOLERANCE["float32"]
    # The first run was the base model's, by the same measure.
    assert max(_max_diff(base_ref, tr) for tr in _turns(before.ok)) < TOLERANCE["float32"]


def test_an_actors_client_takes_newer_weights_only():
    from agentenvs.envs.weights_identity import WeightsIdentity
    from agentenvs.rollout.collect.executors.actor import BuiltClient, ShippedWeights

    spec = PolicySpec("openai", {"url": "http://127.0.0.1:9", "weights_version": 0})
    client = BuiltClient(spec, spec.build())
    v1 = WeightsIdentity(version=1, path="lora", name="run-v1", verified=True)
    v2 = WeightsIdentity(version=2, path="lora", name="run-v2", verified=True)
    client.adopt(ShippedWeights(v1, serial=1))
    assert client.policy.served_model() == "run-v1" and client.policy.weights_version == 1
    client.adopt(ShippedWeights(v2, serial=3))
    client.adopt(ShippedWeights(v1, serial=2))  # a late group of an older run
    client.adopt(None)  # a payload without weights leaves them alone
    assert client.policy.weights == v2 and client.policy.served_model() == "run-v2"
