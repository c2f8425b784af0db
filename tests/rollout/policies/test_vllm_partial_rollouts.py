"""Partial rollouts on the real vLLM server: a full-weights sync lands while actions
are being sampled; they go on from their tokens under the new weights.

One collection with long actions and a sync 0.4 s after they all started: some action holds tokens of
versions 1 and 2, stored as runs; no group is lost or restarted. The samples go to
every hand-off with a declared ``mask`` rule (trained version 2, max staleness 0),
``agentenvs check`` passes each; then a trained version-1 token (the rule broken)
and a rewritten run version (the store corrupted) each fail it.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from support.vllm_server import restore_base_weights, vllm_server  # noqa: F401  (the session fixture)
from support.weight_updates import _perturbed

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.rendered_env import Limits
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.provenance import ProvenanceNotes
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.data.off_policy import OffPolicyRule, apply_rule
from agentenvs.rollout.data.training_data import samples_from_records
from agentenvs.rollout.inspect.check import check_file
from agentenvs.rollout.inspect.page_data import page_data
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.trainers.jsonl.handoff import write_samples_jsonl
from agentenvs.rollout.trainers.pytrio.handoff import save_pytrio_datums
from agentenvs.rollout.trainers.tinker.handoff import save_tinker_datums
from agentenvs.rollout.trainers.trl.rollout_func import _as_trl_batch
from agentenvs.rollout.trainers.verl.handoff import save_verl_batch, to_verl_batch
from agentenvs.rollout.weights.probe import Probe, torch_reference
from agentenvs.rollout.weights.sync import WeightSync
from agentenvs.rollout.weights.token_versions import RUNS_LOG, parse_runs

pytestmark = pytest.mark.services  # starts a real service


@pytest.fixture
def server(vllm_server):  # noqa: F811
    yield vllm_server
    restore_base_weights(vllm_server)  # a fresh loop: the test's own is closed


def _failed(report) -> list[str]:
    return [f.detail for f in report.findings if f.status == "fail"]


async def test_a_sync_mid_action_keeps_its_tokens_as_two_versions_through_every_handoff(
    server, tokenizer, tmp_path
):
    model_dir = server.model_dir
    policy = OpenAICompatPolicy(
        server.url, tokenizer=tokenizer, seed=5, weights_version=0, partial_rollouts=True
    )
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))
    # The base tiny model ends this prompt at once; perturbed weights write on.
    first = _perturbed(model_dir, tmp_path / "v1", seed=1)
    trained = _perturbed(model_dir, tmp_path / "v2", seed=2)
    limits = Limits(max_turns=1, max_tokens_per_turn=400, on_truncated_action="pass")
    builders = [GuessNumberConfig(tasks=1, limits=limits).group_builder(0, 4, tokenizer)]
    store = TrajectoryStore(tmp_path / "store.jsonl")
    rule = OffPolicyRule("mask", max_staleness=0)  # declared by the run, in its provenance
    notes = ProvenanceNotes(sections=rule.section())
    try:
        await sync.push_full(tmp_path / "v1", torch_reference(first))
        collecting = asyncio.create_task(
            collect(builders, policy, CollectOptions(progress=False), store=store, notes=notes)
        )
        while policy.gate.in_flight < 4:  # every action under way, then some tokens in
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.4)
        report = await sync.push_full(tmp_path / "v2", torch_reference(trained))
        result = await collecting
    finally:
        await policy.aclose()
    assert report.identity.version == 2 and len(result.ok) == 1 and not result.failed
    record = result.ok[0]
    spanning = [
        parse_runs(tr.logs[RUNS_LOG])
        for traj in record.group.trajectories
        for tr in traj.transitions
        if RUNS_LOG in tr.logs
    ]
    assert spanning, "no action was cut by the sync"
    for runs in spanning:
        assert [r.version for r in runs] == [1, 2] and runs[1].proof == "verified"
    assert record.provenance["policy"]["weights_versions"] == [1, 2]
    assert record.sampled_by().versions == (1, 2)
    page = page_data([record], tokenizer)
    shown = [
        span["vr"] for traj in page["groups"][0]["trajs"] for span in traj["spans"] if "vr" in span
    ]
    assert [[r[1] for r in runs] for runs in shown] == [[1, 2]] * len(spanning)  # the viewer

    assert OffPolicyRule.of_provenance(record.provenance) == rule
    samples, _ = samples_from_records(result.ok)
    assert any({1, 2} <= set(s.token_versions) for s in samples)
    assert apply_rule(samples, rule, trained=2) > 0  # the version-1 tokens leave the loss
    extra = rule.handoff_extra(trained=2)
    forms = {
        "samples.jsonl": lambda p: write_samples_jsonl(samples, p, extra=extra),
        "tinker.jsonl": lambda p: save_tinker_datums(samples, p, extra=extra),
        "pytrio.jsonl": lambda p: save_pytrio_datums(samples, p, extra=extra),
        "verl.safetensors": lambda p: save_verl_batch(
            to_verl_batch(samples, 0), p, samples=samples, extra=extra
        ),
    }
    for name, save in forms.items():
        save(tmp_path / name)
        report = check_file(tmp_path / name)
        assert _failed(report) == [], name
        rule_findings = [f for f in report.findings if "off-policy rule" in f.detail]
        assert [f.status for f in rule_findings] == ["pass"], name
    # With the store it was made from: the store's samples under the stated rule.
    assert _failed(check_file(tmp_path / "samples.jsonl", reference=store.path)) == []
    trl = _as_trl_batch([record.group], tokenizer, weights_version=2)
    assert any({1, 2} <= set(v) for v in trl["env_token_versions"])
    assert all(
        len(v) == len(c)
        for v, c in zip(trl["env_token_versions"], trl["completion_ids"], strict=True)
    )

    # A trained token outside the rule: a version-1 token put back into the loss.
    lines = (tmp_path / "samples.jsonl").read_text().splitlines()
    broken = []
    for text in lines:
        line = json.loads(text)
        for i, version in enumerate(line["token_versions"]):
            if version == 1 and not broken:
                line["loss_mask"][i], line["advantages"][i] = 1, line["advantage"] or 1.0
                broken.append(i)
        lines[lines.index(text)] = json.dumps(line)
    (tmp_path / "broken.jsonl").write_text("\n".join(lines) + "\n")
    assert _failed(check_file(tmp_path / "broken.jsonl", reference=store.path))
    assert any(
        "outside the declared off-policy rule" in d
        for d in _failed(check_file(tmp_path / "broken.jsonl"))
    )

    # A store whose run version was rewritten (2 -> 3), or whose runs no longer cover the action.
    assert _failed(check_file(store.path)) == []
    text = store.path.read_text()
    for old, new in ((",2,", ",3,"), ("[[", "[[1")):
        corrupted = tmp_path / "corrupted.jsonl"
        stored = json.loads(text.splitlines()[-1])
        _rewrite_first_runs(stored, old, new)
        kept = text.splitlines()[:-1]
        corrupted.write_text("\n".join([*kept, json.dumps(stored)]) + "\n")
        assert any(
            "per-token versions cannot be true" in d for d in _failed(check_file(corrupted))
        ), old


def _rewrite_first_runs(stored: dict, old: str, new: str) -> None:
    def walk(node):
        if isinstance(node, dict):
            if RUNS_LOG in node and isinstance(node[RUNS_LOG], str):
                node[RUNS_LOG] = node[RUNS_LOG].replace(old, new, 1)
                return True
            return any(walk(v) for v in node.values())
        if isinstance(node, list):
            return any(walk(v) for v in node)
        return False

    assert walk(stored)
