"""The drift alarm on real batches from the real vLLM server, at realistic learning rates.

A LoRA step at lr 1e-6 and a full step at lr 1e-5 (``one_rl_step``) are pushed and
verified; a batch sampled with them agrees with the trainer's forward pass of the
same weights (no alarm). Then a corrupted sync: the trainer moves on to the next
step's weights and the policy claims that version, but the server never loaded it
(the sync's probe bypassed, the failure the probe exists for). The first batch
sampled after it alarms, and ``check --drift`` and ``samples_from_records(drift=)``
refuse its groups; so does a corrupted sync that lands mid-episode, in a verl batch
whose rows carry tokens of two versions.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest
import torch
from support.vllm_server import vllm_server  # noqa: F401  (the session fixture)
from support.weight_updates import (
    _group_builders,
    one_rl_step,
    realistic_policy,  # noqa: F401  (a fixture)
)
from typer.testing import CliRunner

from agentenvs.rollout.cli import app
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.data.samples import trajectories_to_samples
from agentenvs.rollout.data.training_data import samples_from_records
from agentenvs.rollout.policies.base import current_turn
from agentenvs.rollout.trainers.verl.drift import batch_drift
from agentenvs.rollout.trainers.verl.handoff import to_verl_batch
from agentenvs.rollout.weights.drift import DriftAlarm, DriftLog, measure_drift, rows_from_records
from agentenvs.rollout.weights.probe import Probe, torch_reference
from agentenvs.rollout.weights.proof import Tolerance
from agentenvs.rollout.weights.stamps import SampledBy
from agentenvs.rollout.weights.sync import WeightSync

pytestmark = pytest.mark.services  # starts a real service

FP32 = Tolerance.for_dtype("float32")


@pytest.mark.parametrize(("path", "lr"), [("lora", 1e-6), ("full", 1e-5)])
async def test_a_sync_that_never_loaded_is_caught_by_the_first_batch_after_it(
    path,
    lr,
    realistic_policy,  # noqa: F811
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    policy = realistic_policy
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))
    v1 = one_rl_step(vllm_server.model_dir, tmp_path / "v1", lr=lr, lora=path == "lora", seed=1)
    push = sync.push_lora if path == "lora" else sync.push_full
    await push(tmp_path / "v1", torch_reference(v1))
    assert policy.weights.proof == "verified"
    store = TrajectoryStore(tmp_path / "trajectories.jsonl")
    log = DriftLog(tmp_path / "drift.jsonl")

    clean = await collect(
        _group_builders(tokenizer) * 2, policy, CollectOptions(progress=False), store=store
    )
    report = measure_drift(
        rows_from_records(clean.ok, torch_reference(v1)), trainer_version=1, tolerance=FP32, step=0
    )
    log.append(report)
    assert report.alarm is None, report
    (on,) = [v for v in report.versions if v.on_policy]
    assert on.version == 1 and on.tokens >= 20 and on.max_abs <= FP32.max

    # The corrupted sync: version 2 claimed, version 1 still served.
    v2 = one_rl_step(vllm_server.model_dir, tmp_path / "v2", lr=lr, lora=path == "lora", seed=2)
    policy.weights = replace(policy.weights, version=2)
    stale = await collect(
        _group_builders(tokenizer) * 2,
        policy,
        CollectOptions(progress=False),
        store=store,
        keys=["s0", "s1"],
    )
    report = measure_drift(
        rows_from_records(stale.ok, torch_reference(v2)), trainer_version=2, tolerance=FP32, step=1
    )
    log.append(report)
    assert report.alarm and "did not run the weights it claims" in report.alarm
    assert report.alarmed_keys == {"s0", "s1"}

    with pytest.raises(DriftAlarm, match=r"group s[01]:"):  # the first in finishing order
        samples_from_records(stale.ok, drift=log.read())
    samples, _ = samples_from_records(clean.ok, drift=log.read())  # the clean batch still trains
    assert samples
    done = CliRunner().invoke(app, ["check", str(store.path), "--drift", str(log.path), "--json"])
    assert done.exit_code == 1, done.output
    failed = [f for f in json.loads(done.output)["findings"] if f["status"] == "fail"]
    assert len(failed) == 1 and "did not run the weights it claims" in failed[0]["detail"]
    assert failed[0]["where"] in ("group s0", "group s1")
    await sync.unload_adapters()
    await policy.aclose()


async def test_a_stale_sync_inside_rows_of_several_versions_alarms(
    realistic_policy,  # noqa: F811
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    """A sync lands mid-episode: every trajectory's first turn is stamped version 1 and
    its later turns version 2, which the server never loaded (the corrupted sync).
    Such rows were left out of the verl batch's drift check (no single version); each
    token is now compared under its own turn's version, and version 2's alarm."""
    policy = realistic_policy
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))
    v1 = one_rl_step(vllm_server.model_dir, tmp_path / "v1", lr=1e-6, lora=True, seed=1)
    await sync.push_lora(tmp_path / "v1", torch_reference(v1))
    v2 = one_rl_step(vllm_server.model_dir, tmp_path / "v2", lr=1e-6, lora=True, seed=2)
    proven = policy.weights
    turns = asyncio.Lock()

    async def sync_lands_after_the_first_turn(observation, stop, *, max_tokens=None):
        slot = current_turn.get()
        async with turns:  # one turn at a time, so each is stamped as its turn says
            later = slot is not None and slot.turn > 0
            policy.weights = replace(proven, version=2) if later else proven
            return await policy(observation, stop, max_tokens=max_tokens)

    result = await collect(
        _group_builders(tokenizer) * 2,
        sync_lands_after_the_first_turn,
        CollectOptions(progress=False),
    )
    records = result.ok
    trajectories = [t for r in records for t in r.group.trajectories]
    assert any(SampledBy.of_trajectory(t).versions == (1, 2) for t in trajectories)
    groups = [r.group for r in records]
    samples = trajectories_to_samples(groups, [[0.0] * len(g.trajectories) for g in groups])
    batch = to_verl_batch(samples, tokenizer.pad_token_id)
    ours = {1: _response_logprobs(v1, samples, batch), 2: _response_logprobs(v2, samples, batch)}

    report = batch_drift(batch, ours, records, trainer_version=2)
    assert report.alarm, report  # was: the mixed rows left out, no alarm
    by_version = {v.version: v for v in report.versions}
    assert report.skipped == 0 and set(by_version) == {1, 2}
    assert by_version[1].alarm is None and by_version[1].on_policy  # version 1 ran
    assert by_version[2].alarm and "did not run the weights it claims" in by_version[2].alarm
    later = [tr for r in records for t in r.group.trajectories for tr in t.transitions[1:]]
    assert by_version[2].tokens == sum(len(tr.ac.tokens) for tr in later)
    await sync.unload_adapters()
    await policy.aclose()


def _response_logprobs(model, samples, batch) -> torch.Tensor:
    """The trainer's logprob of every response token of each row (0 on padding)."""
    reference = torch_reference(model)
    out = torch.zeros(batch["response_mask"].shape, dtype=torch.float32)
    for row, sample in enumerate(samples):
        scored = reference(list(sample.tokens), sample.prompt_length)
        out[row, : len(scored)] = torch.tensor(scored)
    return out
