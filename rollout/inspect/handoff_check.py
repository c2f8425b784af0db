"""``check`` on a hand-off: JSONL samples, a verl batch or Tinker/PyTRIO datums.

Each form is read back as the samples a trainer trains on
(``inspect/handoff_forms.py``). Alone, a hand-off is checked against itself and,
where its lines carry it, against the collection record (tokens, logprobs, mask,
reward, stops and ends). With the store it was made from (``--store``) every sample
must be the store's and every sample the store trains on must be in it, and the store
is checked as well: whatever the store fails (a replay, a version, a reward rule)
the hand-off made from it fails too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentenvs.envs.tokenizing import EnvTextEncoder
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.data.samples import TrainingSample
from agentenvs.rollout.inspect.episode_checks import check_sample_stops
from agentenvs.rollout.inspect.findings import Check, CheckReport, Finding
from agentenvs.rollout.inspect.options import ROUND_TRIP_SAMPLES, CheckOptions
from agentenvs.rollout.inspect.record_checks import check_samples_collected
from agentenvs.rollout.inspect.rescore import Rescorer, check_rescore, recorded_temperature
from agentenvs.rollout.inspect.sample_checks import (
    check_estimator,
    check_sample_alignment,
    check_sample_identity,
    check_sample_loss_inputs,
    check_sample_token_ids,
    check_samples_against_store,
    constant_reward_groups,
    is_per_step,
    zero_logprob_tokens,
)
from agentenvs.rollout.inspect.token_checks import TextRoundTripCheck
from agentenvs.rollout.inspect.token_version_checks import (
    check_rule_as_declared,
    check_token_versions,
    rule_excuses,
    stated_rule,
)


def check_samples(
    samples: Sequence[TrainingSample],
    extras: Sequence[dict[str, Any]],
    *,
    source: str = "",
    reference: Sequence[GroupRecord] | None = None,
    tokenizer: Any = None,
    options: CheckOptions | None = None,
    rescorer: Rescorer | None = None,
) -> CheckReport:
    """Checks of a hand-off's samples; ``reference``, the ok records of the store it was
    made from, lets every sample be judged against what was really sampled and
    earned; ``tokenizer`` adds the vocabulary and last-token checks."""
    options = options or CheckOptions()
    report = CheckReport(source, "samples")
    report.stats = {"samples": len(samples)}
    detail = "a hand-off carries no provenance; check the store"
    report.findings.append(Finding(Check.FIXED_INPUT, "skip", detail))
    report.findings.append(check_sample_alignment(samples))
    estimator = next((e.get("advantage_estimator", e) for e in extras if e), None)
    per_step = is_per_step(estimator)
    report.findings.append(check_sample_identity(samples, per_step=per_step))
    report.findings.append(check_samples_collected(samples, rule_excuses(extras)))
    report.findings.append(check_sample_stops(samples, tokenizer))
    if reference is None:
        report.findings.append(zero_logprob_tokens(samples))
    else:
        stated = stated_rule(extras)
        rule = stated if stated is not None and stated[1] is not None else None
        report.findings += check_samples_against_store(samples, reference, estimator, rule)
        as_declared = check_rule_as_declared(extras, reference)
        if as_declared is not None:
            report.findings.append(as_declared)
    if tokenizer is not None:
        size = EnvTextEncoder.for_tokenizer(tokenizer).vocabulary_size or len(tokenizer)
        report.findings.append(check_sample_token_ids(samples, size))
    if rescorer is not None:
        temperature = recorded_temperature(reference) if reference is not None else None
        report.findings.append(check_rescore(samples, rescorer, temperature=temperature))
    report.findings.append(check_sample_loss_inputs(samples, per_step=per_step))
    per_group: dict[Any, dict[int, tuple[float, float]]] = {}
    for s in samples:  # a trajectory's first sample; the identity check compares the rest
        per_group.setdefault(s.group_index, {}).setdefault(s.traj_index, (s.reward, s.advantage))
    flat = {g: [v[t] for t in sorted(v)] for g, v in per_group.items()}
    report.findings.append(check_estimator(flat, estimator, "group"))
    constant = constant_reward_groups(flat)
    constant.kind = "health"
    report.findings.append(constant)
    versions = check_token_versions(samples, extras)
    if not versions:
        detail = "a hand-off carries no weights versions (check the store for them)"
        versions = [Finding(Check.COMPLETION_BOUNDARIES, "skip", detail)]
    report.findings += versions
    if tokenizer is None:
        detail = "no tokenizer (pass --tokenizer) to re-tokenize with"
        report.findings.append(Finding(Check.RE_RENDERING, "skip", detail))
    else:
        limit = None if options.text_trainer else ROUND_TRIP_SAMPLES
        trip = TextRoundTripCheck(tokenizer, text_trainer=options.text_trainer, limit=limit)
        trip.add_samples("", samples)
        report.findings += trip.findings()
    if options.health == "warn":
        report.downgrade_health()
    return report


def with_store_findings(report: CheckReport, store: CheckReport) -> CheckReport:
    """The hand-off's report with what its store fails (each finding saying so), and a
    line saying how much of the store was checked."""
    failed = [f for f in store.findings if f.status == "fail"]
    for finding in failed:
        finding.detail = f"in the store it was made from: {finding.detail}"
    report.findings += failed
    passed = sum(1 for f in store.findings if f.status == "pass")
    detail = (
        f"the store ({store.source}) was checked too: {passed} findings pass, {len(failed)} fail"
    )
    report.findings.append(Finding(Check.FIXED_INPUT, "info", detail))
    return report
