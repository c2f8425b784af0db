"""A hand-off states the off-policy rule its run declared (issue 41): a converter that
relabels a masked run as ``importance`` (every stale token then "allowed"), loosens
``max_staleness`` or drops the statement fails ``check --store``."""

from __future__ import annotations

import asyncio

import pytest

from agentenvs.envs import make
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.provenance import ProvenanceNotes
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.data.off_policy import OffPolicyRule
from agentenvs.rollout.data.training_data import samples_from_records
from agentenvs.rollout.inspect.check import check_file
from agentenvs.rollout.policies.scripted import ScriptedPolicy
from agentenvs.rollout.trainers.jsonl.handoff import write_samples_jsonl

DECLARED = OffPolicyRule("mask", max_staleness=1)


@pytest.fixture(scope="module")
def store(tmp_path_factory, tokenizer):
    config = make("guess_number", tasks=2)
    builders = [config.group_builder(i, 2, tokenizer) for i in range(2)]
    path = tmp_path_factory.mktemp("rule") / "run.jsonl"
    notes = ProvenanceNotes(sections=DECLARED.section())
    options = CollectOptions(progress=False)
    asyncio.run(
        collect(builders, ScriptedPolicy(), options, store=TrajectoryStore(path), notes=notes)
    )
    return path


def _findings(store, tokenizer, tmp_path, stated: OffPolicyRule | None):
    samples, metadata = samples_from_records(list(TrajectoryStore(store).read()))
    extra = {"advantage_estimator": metadata[0]["advantage_estimator"]}
    if stated is not None:
        extra |= stated.handoff_extra(trained=0)
    handoff = tmp_path / "samples.jsonl"
    write_samples_jsonl(samples, handoff, extra=extra)
    report = check_file(handoff, tokenizer=tokenizer, reference=store)
    return report, [
        f
        for f in report.findings
        if "its run declared" in f.detail or "hand-off states none" in f.detail
    ]


def test_the_declared_rule_stated_passes(store, tokenizer, tmp_path):
    report, (said,) = _findings(store, tokenizer, tmp_path, DECLARED)
    assert said.status == "pass" and "its run declared" in said.detail
    assert report.ok, [f for f in report.findings if f.status == "fail"]


@pytest.mark.parametrize(
    "stated",
    [OffPolicyRule("importance"), OffPolicyRule("mask", max_staleness=4), None],
    ids=["relabelled-importance", "looser-staleness", "unstated"],
)
def test_another_rule_or_none_fails(store, tokenizer, tmp_path, stated):
    report, said = _findings(store, tokenizer, tmp_path, stated)
    assert not report.ok
    assert any(f.status == "fail" and "declared" in f.detail for f in said), said
