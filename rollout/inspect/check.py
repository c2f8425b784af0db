"""``agentenvs check``: the checks a careful person runs before trusting a run's data.

Moving an RL run between trainers goes wrong in a few recurring ways: the input
settings changed mid-run, logprobs or masks drifted off their tokens, advantages
leaked onto environment tokens or were normalised differently than claimed,
samples came from stale weights, or a trainer re-tokenized text the policy never
saw as those tokens. Each check here reads the data itself (a trajectory store or
a JSONL hand-off) and names the first offending trajectory and token position.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from agentenvs.envs.tokenizing import EnvTextEncoder
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.data.samples import TrainingSample, trajectory_to_samples
from agentenvs.rollout.inspect.findings import Check, CheckReport, Finding, Status
from agentenvs.rollout.inspect.image_checks import check_images, sample_image_findings
from agentenvs.rollout.inspect.record_checks import (
    check_collected,
    check_duplicates,
    check_record_facts,
    check_samples_collected,
)
from agentenvs.rollout.inspect.rescore import Rescorer, check_rescore, recorded_temperature
from agentenvs.rollout.inspect.reward_checks import check_rewards
from agentenvs.rollout.inspect.sample_checks import (
    LOGPROB_ROUNDING,
    check_estimator,
    check_sample_alignment,
    check_sample_identity,
    check_sample_loss_inputs,
    check_sample_token_ids,
    check_samples_against_store,
    constant_reward_groups,
    is_per_step,
    logprob_problem,
    zero_logprob_tokens,
)
from agentenvs.rollout.inspect.segment_checks import check_segments
from agentenvs.rollout.inspect.token_checks import (
    check_observation_controls,
    check_split_points,
    check_text_round_trip,
    check_token_ids,
)
from agentenvs.rollout.inspect.tool_checks import DEFAULT_MAX_PARSE_FAILURES, check_tools
from agentenvs.rollout.inspect.tree_checks import check_trees
from agentenvs.rollout.weights.drift import DriftReport, alarmed_keys

__all__ = [
    "CHECKS",
    "LOGPROB_ROUNDING",
    "Check",
    "CheckReport",
    "Finding",
    "Status",
    "check_file",
    "check_records",
]

CHECKS = tuple(Check)
"""Every check, in the order the docs and reports list them."""

# ------------------------------------------------------------------------- trajectories


def _samples(traj: Any, advantage: float, **kwargs: Any) -> list[TrainingSample]:
    """Samples of a trajectory, or none when its logprobs do not fit its tokens (that
    trajectory is reported by :func:`check_logprob_lengths`, not checked further)."""
    try:
        return trajectory_to_samples(traj, advantage, **kwargs)
    except ValueError:
        return []


def _fingerprint_fields(provenance: dict[str, Any]) -> dict[str, Any]:
    tokenizer = provenance.get("tokenizer", {}) or {}
    env = provenance.get("env", {}) or {}
    return {
        "tokenizer.vocab_sha256": tokenizer.get("vocab_sha256"),
        "tokenizer.chat_template_sha256": tokenizer.get("chat_template_sha256"),
        "env.renderer": env.get("renderer"),
        "env.protocol": env.get("protocol"),
        "env.config_sha256": env.get("config_sha256"),
        "sampling": json.dumps(provenance.get("sampling"), sort_keys=True),
        "stop_conditions": json.dumps(provenance.get("stop_conditions"), sort_keys=True),
    }


def check_fixed_input(records: Sequence[GroupRecord]) -> list[Finding]:
    with_provenance = [r for r in records if r.provenance.get("tokenizer")]
    if not with_provenance:
        return [Finding(Check.FIXED_INPUT, "warn", "no provenance recorded: settings not checked")]
    first = _fingerprint_fields(with_provenance[0].provenance)
    findings = []
    for record in with_provenance[1:]:
        current = _fingerprint_fields(record.provenance)
        for name, value in current.items():
            if value != first[name]:
                findings.append(
                    Finding(
                        Check.FIXED_INPUT,
                        "fail",
                        f"{name} changed from {first[name]} to {value}",
                        f"group {record.key}",
                    )
                )
                first[name] = value  # report each change once
    if not findings:
        findings.append(
            Finding(
                Check.FIXED_INPUT,
                "pass",
                f"one tokenizer, template, renderer, env config and sampling setting "
                f"in {len(with_provenance)} groups",
            )
        )
    return findings


def check_action_text(records: Sequence[GroupRecord], tokenizer: Any) -> Finding:
    """Decoding each sampled span reproduces the text the environment parsed; spans
    without the record are counted (and named) rather than passed over."""
    checked = 0
    missing: list[str] = []
    for record in records:
        for t, traj in enumerate(record.group.trajectories if record.group else []):
            for turn, tr in enumerate(traj.transitions):
                recorded = tr.logs.get("action_text")
                if recorded is None:
                    missing.append(f"group {record.key} traj {t} turn {turn}")
                    continue
                decoded = tokenizer.decode(tr.ac.tokens, skip_special_tokens=False)
                checked += 1
                if decoded != recorded:
                    at = next(
                        (
                            i
                            for i, (a, b) in enumerate(zip(decoded, recorded, strict=False))
                            if a != b
                        ),
                        min(len(decoded), len(recorded)),
                    )
                    return Finding(
                        Check.FIXED_TRAJECTORY,
                        "fail",
                        f"sampled tokens decode to {decoded[at : at + 30]!r} where the env read "
                        f"{recorded[at : at + 30]!r} (character {at})",
                        f"group {record.key} traj {t} turn {turn}",
                    )
    if not checked:
        return Finding(Check.FIXED_TRAJECTORY, "warn", "no recorded action text to compare")
    if missing:
        return Finding(
            Check.FIXED_TRAJECTORY,
            "warn",
            f"{checked} sampled spans decode to the text read, but {len(missing)} carry no "
            "action text (not compared)",
            f"first: {missing[0]}",
        )
    return Finding(
        Check.FIXED_TRAJECTORY, "pass", f"{checked} sampled spans decode to the text read"
    )


def check_logprob_lengths(records: Sequence[GroupRecord]) -> Finding:
    """One logprob per sampled token, each a finite number <= 0: a NaN poisons the loss
    and a positive value is no probability (the collector refuses both from a policy,
    so in a store they are corruption)."""
    for record in records:
        for t, traj in enumerate(record.group.trajectories if record.group else []):
            for turn, tr in enumerate(traj.transitions):
                lp = tr.ac.logprobs
                where = f"group {record.key} traj {t} turn {turn}"
                if lp is not None and len(lp) != len(tr.ac.tokens):
                    return Finding(
                        Check.FIXED_TRAJECTORY,
                        "fail",
                        f"{len(tr.ac.tokens)} sampled tokens but {len(lp)} logprobs",
                        where,
                    )
                for i, value in enumerate(lp or ()):
                    if problem := logprob_problem(value):
                        return Finding(
                            Check.FIXED_TRAJECTORY, "fail", problem, f"{where} token {i}"
                        )
    return Finding(
        Check.FIXED_TRAJECTORY, "pass", "every action has one finite logprob <= 0 per token"
    )


def check_staleness(
    records: Sequence[GroupRecord], current_version: int | None, max_staleness: int | None
) -> list[Finding]:
    versions = []
    for record in records:
        versions.append((record.key, record.sampled_by().version))
    known = [(k, v) for k, v in versions if v is not None]
    if not known:
        if max_staleness is not None:  # asked for a guarantee the data cannot give
            return [
                Finding(
                    Check.COMPLETION_BOUNDARIES,
                    "fail",
                    "cannot check staleness: no weights version recorded",
                )
            ]
        return [Finding(Check.COMPLETION_BOUNDARIES, "warn", "no weights version recorded")]
    if current_version is None and max_staleness is not None:
        return [
            Finding(
                Check.COMPLETION_BOUNDARIES,
                "fail",
                "cannot check staleness without the current version (pass --current-version)",
            )
        ]
    if current_version is None:
        counts = Counter(str(v) for _, v in known)
        return [
            Finding(
                Check.COMPLETION_BOUNDARIES,
                "pass",
                f"weights versions present: {dict(counts)} (pass --current-version to judge)",
            )
        ]
    histogram: Counter[int] = Counter()
    worst: tuple[int, str] | None = None
    for key, version in known:
        try:
            staleness = int(current_version) - int(version)
        except (TypeError, ValueError):
            return [
                Finding(
                    Check.COMPLETION_BOUNDARIES,
                    "fail",
                    f"weights version {version!r} is not a number",
                    f"group {key}",
                )
            ]
        histogram[staleness] += 1
        if max_staleness is not None and staleness > max_staleness and worst is None:
            worst = (staleness, key)
    text = ", ".join(f"{s}: {n}" for s, n in sorted(histogram.items()))
    findings = [Finding(Check.COMPLETION_BOUNDARIES, "pass", f"staleness histogram {{{text}}}")]
    if worst is not None:
        findings.append(
            Finding(
                Check.COMPLETION_BOUNDARIES,
                "fail",
                f"samples {worst[0]} versions behind (max allowed {max_staleness})",
                f"group {worst[1]}",
            )
        )
    missing = [k for k, v in versions if v is None]
    if missing:
        # Under a staleness bound a group that cannot be judged is refused, as
        # samples_from_records refuses it; without one it is only pointed out.
        strict = max_staleness is not None
        findings.append(
            Finding(
                Check.COMPLETION_BOUNDARIES,
                "fail" if strict else "warn",
                f"{len(missing)} groups have no weights version"
                + (": their staleness cannot be bounded" if strict else ""),
                f"first: group {missing[0]}",
            )
        )
    return findings


def check_drift(records: Sequence[GroupRecord], reports: Sequence[DriftReport]) -> list[Finding]:
    """The trainer's drift reports (``--drift``): a record of a batch whose on-policy
    tokens disagreed with the trainer fails (its sampler did not run the weights it
    claims); records no report covers are counted."""
    refused = alarmed_keys(reports)
    covered = {k for r in reports for v in r.versions for k in v.keys}
    findings = []
    for record in records:
        if record.key in refused:
            findings.append(
                Finding(
                    Check.COMPLETION_BOUNDARIES, "fail", refused[record.key], f"group {record.key}"
                )
            )
            break
    on_policy = [v for r in reports for v in r.versions if v.on_policy]
    tokens = sum(v.tokens for v in on_policy)
    worst = max((v.rms for v in on_policy), default=0.0)
    findings.append(
        Finding(
            Check.COMPLETION_BOUNDARIES,
            "pass" if tokens else "warn",
            f"drift: {len(reports)} steps, {tokens} on-policy tokens compared with the trainer, "
            f"worst rms {worst:.3g}; {sum(r.alarm is not None for r in reports)} alarmed",
        )
    )
    uncovered = sum(1 for r in records if r.key not in covered)
    if uncovered:
        findings.append(
            Finding(
                Check.COMPLETION_BOUNDARIES,
                "info",
                f"{uncovered} groups appear in no drift report (not trained on yet)",
            )
        )
    return findings


def check_records(
    records: Sequence[GroupRecord],
    *,
    source: str = "",
    tokenizer: Any = None,
    current_version: int | None = None,
    max_staleness: int | None = None,
    text_trainer: bool = False,
    drift: Sequence[DriftReport] | None = None,
    every_line: Sequence[GroupRecord] | None = None,
    rescorer: Rescorer | None = None,
    max_tool_parse_failures: float = DEFAULT_MAX_PARSE_FAILURES,
) -> CheckReport:
    """Every check on a store's records (each group's latest outcome). ``text_trainer``
    makes a text round-trip difference a failure (for trainers that re-tokenize decoded
    text); ``drift``, the trainer's drift reports
    (:mod:`agentenvs.rollout.weights.drift`), fails records of a batch that alarmed;
    ``every_line``, all records in file order, lets a group stored twice be caught
    (reading keeps one of them); ``rescorer`` compares the recorded logprobs with a
    local model's (``inspect/rescore.py``)."""
    report = CheckReport(source, "trajectories")
    ok = [r for r in records if r.status == "ok" and r.group is not None]
    report.stats = {"groups": len(records), "ok": len(ok), "failed": len(records) - len(ok)}
    if every_line is not None:
        report.findings.append(check_duplicates(every_line))
    if not ok:
        report.findings.append(
            Finding(
                Check.FIXED_INPUT, "fail", f"no ok group in {len(records)}: nothing to train on"
            )
        )
    report.findings += check_fixed_input(ok)
    report.findings += check_record_facts(ok)
    report.findings += check_rewards(ok)  # reward code identity, judge verdicts

    report.findings.append(check_logprob_lengths(ok))
    samples: list[TrainingSample] = []
    sample_keys: list[str] = []
    per_group: dict[Any, list[tuple[float, float]]] = {}
    estimators = []
    for record in ok:
        assert record.group is not None
        rewards = record.group.total_rewards()
        advantages = record.extra.get("advantages") or [0.0] * len(rewards)
        estimators.append(json.dumps(record.extra.get("advantage_estimator"), sort_keys=True))
        per_group[record.key] = list(zip(rewards, advantages, strict=False))
        for t, (traj, adv) in enumerate(zip(record.group.trajectories, advantages, strict=False)):
            for sample in _samples(traj, adv, traj_index=t, reward=rewards[t]):
                samples.append(sample)
                sample_keys.append(record.key)
    report.stats["samples"] = len(samples)
    report.findings.append(check_sample_alignment(samples, sample_keys))
    if tokenizer is not None:
        report.findings.append(check_action_text(ok, tokenizer))
        report.findings.append(check_token_ids(ok, tokenizer))
        renderer = (ok[0].provenance.get("env") or {}).get("renderer") if ok else None
        report.findings.append(check_observation_controls(ok, tokenizer, renderer))
    # After the checks that name one token: a digest names only the span that changed.
    report.findings += check_collected(ok)
    if rescorer is not None:
        temperature = recorded_temperature(ok)
        report.findings.append(
            check_rescore(samples, rescorer, sample_keys, temperature=temperature)
        )

    report.findings.append(check_sample_loss_inputs(samples, sample_keys))
    distinct = set(estimators)
    if len(distinct) > 1:
        report.findings.append(
            Finding(Check.LOSS_INPUTS, "fail", f"{len(distinct)} different advantage estimators")
        )
    recorded = json.loads(estimators[0]) if estimators else None
    if any(r.extra.get("advantages") is not None for r in ok):
        report.findings.append(check_estimator(per_group, recorded, "group"))
    else:
        report.findings.append(Finding(Check.LOSS_INPUTS, "warn", "no advantages stored"))
    report.findings.append(constant_reward_groups(per_group))

    report.findings += check_staleness(ok, current_version, max_staleness)
    if drift is not None:
        report.findings += check_drift(ok, drift)
    report.findings += check_trees(ok)  # tree rollouts only (inspect/tree_checks.py)
    report.findings += check_segments(ok)  # gateway captures only (inspect/segment_checks.py)
    # tool environments only; ``max_tool_parse_failures`` is the share allowed to fail
    report.findings += check_tools(ok, tokenizer, max_parse_failures=max_tool_parse_failures)
    report.findings += check_images(ok, source or None)  # image runs only (inspect/image_checks.py)

    report.findings += check_split_points(ok, tokenizer)
    if tokenizer is None:
        report.findings.append(
            Finding(
                Check.RE_RENDERING, "skip", "no tokenizer (pass --tokenizer) to re-tokenize with"
            )
        )
    else:
        keyed = list(zip(sample_keys, samples, strict=True))
        report.findings.append(check_text_round_trip(keyed, tokenizer, text_trainer=text_trainer))
    return report


def check_samples(
    samples: Sequence[TrainingSample],
    extras: Sequence[dict[str, Any]],
    *,
    source: str = "",
    reference: Sequence[GroupRecord] | None = None,
    tokenizer: Any = None,
    text_trainer: bool = False,
    rescorer: Rescorer | None = None,
) -> CheckReport:
    """Checks of a samples hand-off; ``reference``, the store it was made from, lets
    every sample be judged against what was really sampled and earned (and the store
    against what was collected); ``tokenizer`` adds the vocabulary checks."""
    report = CheckReport(source, "samples")
    report.stats = {"samples": len(samples)}
    report.findings.append(
        Finding(Check.FIXED_INPUT, "skip", "a samples file carries no provenance; check the store")
    )
    report.findings.append(check_sample_alignment(samples))
    estimator = next((e.get("advantage_estimator", e) for e in extras if e), None)
    report.findings.append(check_sample_identity(samples, per_step=is_per_step(estimator)))
    report.findings.append(check_samples_collected(samples))
    if reference is None:
        report.findings.append(zero_logprob_tokens(samples))
    else:
        ok = [r for r in reference if r.status == "ok" and r.group is not None]
        report.findings += [f for f in check_collected(ok) if f.status == "fail"]
        report.findings.append(check_samples_against_store(samples, reference, estimator))
    if tokenizer is not None:
        size = EnvTextEncoder.for_tokenizer(tokenizer).vocabulary_size or len(tokenizer)
        report.findings.append(check_sample_token_ids(samples, size))
    if rescorer is not None:
        temperature = recorded_temperature(reference) if reference is not None else None
        report.findings.append(check_rescore(samples, rescorer, temperature=temperature))
    report.findings.append(check_sample_loss_inputs(samples, per_step=is_per_step(estimator)))
    per_group: dict[Any, dict[int, tuple[float, float]]] = {}
    for s in samples:  # a trajectory's first sample; the identity check compares the rest
        per_group.setdefault(s.group_index, {}).setdefault(s.traj_index, (s.reward, s.advantage))
    flat = {g: [v[t] for t in sorted(v)] for g, v in per_group.items()}
    report.findings.append(check_estimator(flat, estimator, "group"))
    report.findings.append(constant_reward_groups(flat))
    report.findings.append(
        Finding(Check.COMPLETION_BOUNDARIES, "skip", "a samples file carries no weights versions")
    )
    if tokenizer is None:
        report.findings.append(
            Finding(
                Check.RE_RENDERING, "skip", "no tokenizer (pass --tokenizer) to re-tokenize with"
            )
        )
    else:
        keyed = [("", s) for s in samples]
        report.findings.append(check_text_round_trip(keyed, tokenizer, text_trainer=text_trainer))
    return report


def _first_json_line(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                try:
                    return json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(
                        f"{path} is not JSON lines ({err.msg}); pass a trajectory store or a "
                        "samples file"
                    ) from None
    raise ValueError(f"{path} is empty")


def file_kind(path: Path) -> Literal["trajectories", "samples"]:
    """What a file holds, judged by its first line; ValueError when it is neither."""
    first = _first_json_line(path)
    if "trajectories" in first and "key" in first:
        return "trajectories"
    if "loss_mask" in first and "tokens" in first:
        return "samples"
    raise ValueError(
        f"{path} is neither a trajectory store (written by `agentenvs rollout --out`) nor a "
        "samples file (written by agentenvs.rollout.trainers.jsonl.handoff.write_samples_jsonl)"
    )


def _load_lines(path: Path) -> Iterable[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not JSON ({err.msg})") from None


def check_file(
    path: str | Path,
    *,
    tokenizer: Any = None,
    current_version: int | None = None,
    max_staleness: int | None = None,
    text_trainer: bool = False,
    reference: str | Path | None = None,
    rescorer: Rescorer | None = None,
    max_tool_parse_failures: float = DEFAULT_MAX_PARSE_FAILURES,
) -> CheckReport:
    """Check a trajectory store or a JSONL samples hand-off; the kind is detected.

    ``reference`` is the trajectory store a samples file was made from;
    ``text_trainer`` fails samples whose decoded text re-tokenizes differently.
    """
    from agentenvs.rollout.collect.store import read_store

    path = Path(path)
    if file_kind(path) == "trajectories":
        contents = read_store(path)
        return check_records(
            contents.latest(),  # superseded failures do not count
            source=str(path),
            tokenizer=tokenizer,
            current_version=current_version,
            max_staleness=max_staleness,
            text_trainer=text_trainer,
            every_line=contents.records,
            rescorer=rescorer,
            max_tool_parse_failures=max_tool_parse_failures,
        )
    from agentenvs.rollout.trainers.jsonl.handoff import sample_from_json

    samples, extras = [], []
    for line in _load_lines(path):
        # Lengths are checked by the report, not refused while loading.
        samples.append(sample_from_json(line, strict=False))
        extras.append(line.get("extra") or {})
    store = read_store(reference).latest() if reference is not None else None
    report = check_samples(
        samples,
        extras,
        source=str(path),
        reference=store,
        tokenizer=tokenizer,
        text_trainer=text_trainer,
        rescorer=rescorer,
    )
    report.findings += sample_image_findings(samples, reference, store)  # images only
    return report
