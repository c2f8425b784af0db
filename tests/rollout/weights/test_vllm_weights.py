"""Weight sync against the real vLLM: both paths, the verification, the prefix-cache trap.

Each test changes the session server's weights and puts the base weights back
after itself (a full reload of the saved base model, then a cache reset), so the
other vLLM tests keep seeing the model on disk.
"""

from __future__ import annotations

import asyncio

import pytest
from support.vllm_server import LORA_RANK, restore_base_weights, vllm_server  # noqa: F401  (the session fixture)
from support.weight_updates import _adapter, _group_builders, _load, _perturbed

from agentenvs.envs.weights_identity import hash_weights
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.policies.base import PolicyError
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.weights.probe import Probe, VerificationError, torch_reference
from agentenvs.rollout.weights.sync import WeightSync

pytestmark = pytest.mark.services  # starts a real service


@pytest.fixture
def sync(vllm_server, tokenizer):  # noqa: F811
    policy = OpenAICompatPolicy(
        vllm_server.url, tokenizer=tokenizer, seed=11, weights_version=0, max_tokens=12
    )
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))
    yield sync
    asyncio.run(sync.unload_adapters())  # a fresh loop: the test's own is closed
    restore_base_weights(vllm_server)


async def test_full_reload_is_verified_and_stamped_on_every_turn(
    sync,
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    trained = _perturbed(vllm_server.model_dir, tmp_path / "v1", seed=1)
    report = await sync.push_full(tmp_path / "v1", torch_reference(trained))
    identity = sync.policy.weights
    assert identity.verified and identity.version == 1 and identity.path == "full"
    assert identity.sha256 == hash_weights(tmp_path / "v1")
    assert report.paused and report.probe.max_abs_diff < 1e-3
    assert report.reset_s > 0 and report.load_s > 0  # each step timed on its own
    # The probe would not match the old weights: the check has teeth.
    old = torch_reference(_load(vllm_server.model_dir))
    sequence = sync.probe.prompt + report.probe.tokens
    before = old(sequence, len(sync.probe.prompt))
    assert max(abs(a - b) for a, b in zip(before, report.probe.server, strict=True)) > 0.1

    result = await collect(_group_builders(tokenizer), sync.policy, CollectOptions(progress=False))
    record = result.ok[0]
    assert record.provenance["policy"]["weights_version"] == 1
    assert record.provenance["policy"]["weights"]["sha256"] == identity.sha256
    for traj in record.group.trajectories:
        for tr in traj.transitions:
            assert tr.logs["policy/weights_version"] == 1
            assert tr.logs["policy/weights"] == identity.label()
    await sync.policy.aclose()


async def test_prefix_cache_trap_is_closed_by_the_reset(
    sync,
    vllm_server,  # noqa: F811
    tmp_path,
):
    first = _perturbed(vllm_server.model_dir, tmp_path / "v1", seed=1)
    await sync.push_full(tmp_path / "v1", torch_reference(first))  # the probe is now cached
    second = _perturbed(vllm_server.model_dir, tmp_path / "v2", seed=2)
    with pytest.raises(VerificationError, match="did not verify"):
        await sync.push_full(tmp_path / "v2", torch_reference(second), reset_prefix_cache=False)
    assert sync.policy.weights.failed  # the server's weights are not vouched for
    with pytest.raises(PolicyError, match="sampling refused"):
        await sync.policy([5, 6, 7], [], max_tokens=2)
    report = await sync.push_full(tmp_path / "v2", torch_reference(second))  # with the reset
    assert report.identity.verified and report.identity.version == 2
    assert report.probe.max_abs_diff < 1e-3
    await sync.policy.aclose()


async def test_lora_adapter_is_loaded_verified_and_sampled_by_name(
    sync,
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    adapted = _adapter(vllm_server.model_dir, tmp_path / "lora1", seed=3)
    report = await sync.push_lora(tmp_path / "lora1", torch_reference(adapted))
    identity = report.identity
    assert identity.path == "lora" and identity.verified
    assert identity.name == f"{sync.adapter_prefix}-v1" == sync.policy.served_model()
    result = await collect(_group_builders(tokenizer), sync.policy, CollectOptions(progress=False))
    turn = result.ok[0].group.trajectories[0].transitions[0]
    assert turn.logs["policy/weights"] == identity.label()
    # A wrong reference (the base model) does not verify; the previous adapter stays.
    _adapter(vllm_server.model_dir, tmp_path / "lora2", seed=4)
    with pytest.raises(VerificationError, match="keeps serving the previous adapter"):
        await sync.push_lora(tmp_path / "lora2", torch_reference(_load(vllm_server.model_dir)))
    assert sync.policy.weights == identity
    out = await sync.policy([5, 6, 7], [], max_tokens=2)
    assert out.stamp["weights"] == identity.label()
    await sync.policy.aclose()
