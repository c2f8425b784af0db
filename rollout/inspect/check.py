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
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.data.advantages import ESTIMATORS, group_advantages
from agentenvs.rollout.data.samples import TrainingSample, trajectory_to_samples
from agentenvs.rollout.inspect.findings import Check, CheckReport, Finding, Status
from agentenvs.rollout.inspect.token_checks import (
    check_observation_controls,
    check_split_points,
    check_text_round_trip,
    check_token_ids,
)
from agentenvs.rollout.inspect.tree_checks import check_trees
from agentenvs.rollout.weights.drift import DriftReport, alarmed_keys

__all__ = ["CHECKS", "Check", "CheckReport", "Finding", "Status", "check_file", "check_records"]

CHECKS = tuple(Check)
"""Every check, in the order the docs and reports list them."""

_TOLERANCE = 1e-6


# ---------------------------------------------------------------------------- samples


def _sample_where(sample: TrainingSample, position: int | None = None, key: str = "") -> str:
    head = (
        f"group {key or sample.group_index} traj {sample.traj_index} sample {sample.sample_index}"
    )
    return head if position is None else f"{head} token {position}"


def check_sample_alignment(samples: Sequence[TrainingSample], keys: Sequence[str] = ()) -> Finding:
    """Per-token lists line up, and nothing but sampled tokens carries loss or logprob."""
    for i, s in enumerate(samples):
        key = keys[i] if i < len(keys) else ""
        n = len(s.tokens)
        lengths = {
            "loss_mask": len(s.loss_mask),
            "logprobs": len(s.logprobs),
            "advantages": len(s.advantages),
        }
        bad = {k: v for k, v in lengths.items() if v != n}
        if bad:
            return Finding(
                Check.FIXED_TRAJECTORY,
                "fail",
                f"{n} tokens but {bad}: per-token lists do not line up",
                _sample_where(s, key=key),
            )
        for pos in range(n):
            mask = s.loss_mask[pos]
            if mask not in (0, 1):
                return Finding(
                    Check.FIXED_TRAJECTORY,
                    "fail",
                    f"mask value {mask!r}",
                    _sample_where(s, pos, key),
                )
            if mask == 0 and s.logprobs[pos] != 0.0:
                return Finding(
                    Check.FIXED_TRAJECTORY,
                    "fail",
                    f"logprob {s.logprobs[pos]:.4g} on a token outside the loss mask: "
                    "logprobs are shifted or the mask misses a sampled token",
                    _sample_where(s, pos, key),
                )
        first_in_loss = next((i for i, m in enumerate(s.loss_mask) if m == 1), None)
        if first_in_loss is not None and first_in_loss < s.prompt_length:
            return Finding(
                Check.FIXED_TRAJECTORY,
                "fail",
                f"loss mask covers a prompt token (the prompt has {s.prompt_length} tokens)",
                _sample_where(s, first_in_loss, key),
            )
        if n and s.loss_mask[0] == 1:
            return Finding(
                Check.FIXED_TRAJECTORY,
                "fail",
                "the first token is in the loss mask, but nothing predicts it (no context)",
                _sample_where(s, 0, key),
            )
    return Finding(
        Check.FIXED_TRAJECTORY,
        "pass",
        f"{len(samples)} samples: tokens, masks and logprobs line up",
    )


def zero_logprob_tokens(samples: Sequence[TrainingSample], keys: Sequence[str] = ()) -> Finding:
    """Trained tokens whose sampler logprob is exactly 0.0, in a file without spans.

    Engines return 0.0 for a token whose probability rounds to 1, so 0.0 proves
    nothing; environment tokens also carry 0.0, though, and a samples file has no
    record of which tokens were sampled. Compare against the store to decide
    (``reference`` in :func:`check_file`, ``--store`` on the command line).
    """
    for i, s in enumerate(samples):
        if not s.has_logprobs:
            continue
        zero = [
            p
            for p, (m, lp) in enumerate(zip(s.loss_mask, s.logprobs, strict=False))
            if m == 1 and lp == 0.0
        ]
        real = any(lp != 0.0 for m, lp in zip(s.loss_mask, s.logprobs, strict=False) if m == 1)
        if zero and real:
            key = keys[i] if i < len(keys) else ""
            return Finding(
                Check.FIXED_TRAJECTORY,
                "warn",
                "a trained token has logprob exactly 0.0: a sampled token of probability ~1, "
                "or an environment token in the loss mask; pass the store to tell",
                _sample_where(s, zero[0], key),
            )
    return Finding(Check.FIXED_TRAJECTORY, "pass", "no trained token with a 0.0 logprob to explain")


def check_samples_against_store(
    samples: Sequence[TrainingSample], records: Sequence[GroupRecord]
) -> Finding:
    """A hand-off's samples hold the store's tokens, with mask 1 exactly on sampled ones.

    The store knows which tokens were sampled (each transition's action), so this
    decides what a logprob value cannot.
    """
    ok = [r for r in records if r.status == "ok" and r.group is not None]
    derived: dict[tuple[int, int, int], TrainingSample] = {}
    for g, record in enumerate(ok):
        assert record.group is not None
        for t, traj in enumerate(record.group.trajectories):
            for sample in _samples(traj, 0.0, group_index=g, traj_index=t):
                derived[(g, t, sample.sample_index)] = sample
    for s in samples:
        want = derived.get((s.group_index, s.traj_index, s.sample_index))
        if want is None:
            return Finding(
                Check.FIXED_TRAJECTORY, "fail", "a sample the store does not hold", _sample_where(s)
            )
        if s.tokens != want.tokens:
            pos = _first_index_differing(s.tokens, want.tokens)
            return Finding(
                Check.FIXED_TRAJECTORY,
                "fail",
                "tokens differ from the store's: not what the policy saw and sampled",
                _sample_where(s, pos),
            )
        if s.loss_mask != want.loss_mask:
            pos = _first_index_differing(s.loss_mask, want.loss_mask)
            detail = (
                "loss mask covers a token the policy did not sample: an environment token is "
                "being trained on"
                if s.loss_mask[pos] == 1
                else "loss mask misses a token the policy sampled"
            )
            return Finding(Check.FIXED_TRAJECTORY, "fail", detail, _sample_where(s, pos))
    return Finding(
        Check.FIXED_TRAJECTORY, "pass", f"{len(samples)} samples match the store's tokens and masks"
    )


def _first_index_differing(a: Sequence[Any], b: Sequence[Any]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


PER_STEP_ESTIMATORS = frozenset({"tree_segment"})
"""Estimators that give each step its own advantage (``data/tree_advantages.py``), so a
sample's trained tokens carry several values, one per sampled span."""


def is_per_step(estimator: dict[str, Any] | None) -> bool:
    """Whether a recorded ``advantage_estimator`` gives per-step advantages."""
    return isinstance(estimator, dict) and estimator.get("estimator") in PER_STEP_ESTIMATORS


def _masked_token_problem(s: TrainingSample) -> tuple[int, str] | None:
    for pos, (mask, adv) in enumerate(zip(s.loss_mask, s.advantages, strict=False)):
        if mask == 0 and adv != 0.0:
            return pos, f"advantage {adv:.4g} on a masked (non-sampled) token"
    return None


def _scalar_problem(s: TrainingSample) -> tuple[int, str] | None:
    """One advantage per trajectory: every trained token carries ``s.advantage``."""
    for pos, (mask, adv) in enumerate(zip(s.loss_mask, s.advantages, strict=False)):
        if mask == 1 and abs(adv - s.advantage) > _TOLERANCE:
            return pos, f"advantage {adv:.4g} differs from the trajectory's {s.advantage:.4g}"
    return None


def _per_step_problem(s: TrainingSample) -> tuple[int, str] | None:
    """One advantage per step: constant within each run of trained tokens (a step's
    sampled action), free to change from one run to the next."""
    start: int | None = None
    for pos, (mask, adv) in enumerate(zip(s.loss_mask, s.advantages, strict=False)):
        if mask != 1:
            start = None
        elif start is None:
            start = pos
        elif abs(adv - s.advantages[start]) > _TOLERANCE:
            return pos, (
                f"advantage {adv:.4g} differs from {s.advantages[start]:.4g} at the start of "
                f"its sampled span (token {start}): a per-step estimator gives a step one value"
            )
    return None


def check_sample_loss_inputs(
    samples: Sequence[TrainingSample], keys: Sequence[str] = (), *, per_step: bool = False
) -> Finding:
    """Masked tokens carry no advantage; trained tokens carry the trajectory's scalar,
    or with ``per_step`` (see :data:`PER_STEP_ESTIMATORS`) one value per sampled span."""
    trained_rule = _per_step_problem if per_step else _scalar_problem
    for i, s in enumerate(samples):
        key = keys[i] if i < len(keys) else ""
        masked, trained = _masked_token_problem(s), trained_rule(s)
        found = [p for p in (masked, trained) if p is not None]
        if found:
            pos, message = min(found)
            return Finding(Check.LOSS_INPUTS, "fail", message, _sample_where(s, pos, key))
    shape = "one per sampled span" if per_step else "the trajectory's own"
    return Finding(Check.LOSS_INPUTS, "pass", f"no advantage on masked tokens; trained: {shape}")


def check_estimator(
    per_group: dict[Any, list[tuple[float, float]]], estimator: dict[str, Any] | None, label: str
) -> Finding:
    """Recompute each group's advantages from its rewards with the recorded estimator."""
    if not estimator or not estimator.get("estimator"):
        return Finding(Check.LOSS_INPUTS, "warn", "no advantage estimator recorded: not re-checked")
    if estimator["estimator"] not in ESTIMATORS:  # a tree estimator needs the tree
        return Finding(
            Check.LOSS_INPUTS,
            "warn",
            f"advantages by {estimator['estimator']} are not recomputed from a samples file",
        )
    name = estimator["estimator"]
    normalize = bool(estimator.get("normalize_std", False))
    eps = float(estimator.get("eps", 1e-6))
    for group, pairs in per_group.items():
        rewards = [r for r, _ in pairs]
        recorded = [a for _, a in pairs]
        expected = group_advantages(rewards, name, normalize_std=normalize, eps=eps)
        for t, (got, want) in enumerate(zip(recorded, expected, strict=True)):
            if not math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-5):
                return Finding(
                    Check.LOSS_INPUTS,
                    "fail",
                    f"advantage {got:.6g} but {name}"
                    f"{' (std-normalised)' if normalize else ''} of the rewards gives {want:.6g}",
                    f"{label} {group} traj {t}",
                )
    return Finding(
        Check.LOSS_INPUTS,
        "pass",
        f"advantages match the recorded estimator ({name}"
        f"{', std-normalised' if normalize else ''}) in {len(per_group)} groups",
    )


def constant_reward_groups(per_group: dict[Any, list[tuple[float, float]]]) -> Finding:
    constant = [g for g, pairs in per_group.items() if len({r for r, _ in pairs}) <= 1]
    if not constant:
        return Finding(Check.LOSS_INPUTS, "pass", "no constant-reward groups")
    return Finding(
        Check.LOSS_INPUTS,
        "warn",
        f"{len(constant)} of {len(per_group)} groups have one reward for every trajectory "
        "(zero advantage: no learning signal)",
        f"first: group {constant[0]}",
    )


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
    """Decoding each sampled span reproduces the text the environment parsed."""
    checked = 0
    for record in records:
        for t, traj in enumerate(record.group.trajectories if record.group else []):
            for turn, tr in enumerate(traj.transitions):
                recorded = tr.logs.get("action_text")
                if recorded is None:
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
    return Finding(
        Check.FIXED_TRAJECTORY, "pass", f"{checked} sampled spans decode to the text read"
    )


LOGPROB_ROUNDING = 1e-4
"""How far above 0 an engine's rounding may put a logprob (log p <= 0 exactly)."""


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
                    if not isinstance(value, int | float) or not math.isfinite(value):
                        problem = f"logprob {value!r} is not a finite number"
                    elif value > LOGPROB_ROUNDING:
                        problem = f"logprob {value:+.3g} is above 0 (no probability)"
                    else:
                        continue
                    return Finding(Check.FIXED_TRAJECTORY, "fail", problem, f"{where} token {i}")
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
    missing = len(versions) - len(known)
    if missing:
        findings.append(
            Finding(
                Check.COMPLETION_BOUNDARIES, "warn", f"{missing} groups have no weights version"
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
) -> CheckReport:
    """Every check on a store's records. ``text_trainer`` makes a text round-trip
    difference a failure (for trainers that re-tokenize decoded text); ``drift``,
    the trainer's drift reports (:mod:`agentenvs.rollout.weights.drift`), fails
    records of a batch that alarmed."""
    report = CheckReport(source, "trajectories")
    ok = [r for r in records if r.status == "ok" and r.group is not None]
    report.stats = {"groups": len(records), "ok": len(ok), "failed": len(records) - len(ok)}
    if not ok:
        report.findings.append(
            Finding(
                Check.FIXED_INPUT, "fail", f"no ok group in {len(records)}: nothing to train on"
            )
        )
    report.findings += check_fixed_input(ok)

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
) -> CheckReport:
    """Checks of a samples hand-off; ``reference``, the store it was made from, lets
    the tokens and masks be judged against what was really sampled."""
    report = CheckReport(source, "samples")
    report.stats = {"samples": len(samples)}
    report.findings.append(
        Finding(Check.FIXED_INPUT, "skip", "a samples file carries no provenance; check the store")
    )
    report.findings.append(check_sample_alignment(samples))
    if reference is None:
        report.findings.append(zero_logprob_tokens(samples))
    else:
        report.findings.append(check_samples_against_store(samples, reference))
    estimator = next((e.get("advantage_estimator", e) for e in extras if e), None)
    report.findings.append(check_sample_loss_inputs(samples, per_step=is_per_step(estimator)))
    per_group: dict[Any, dict[int, tuple[float, float]]] = {}
    for s in samples:
        per_group.setdefault(s.group_index, {})[s.traj_index] = (s.reward, s.advantage)
    flat = {g: [v[t] for t in sorted(v)] for g, v in per_group.items()}
    report.findings.append(check_estimator(flat, estimator, "group"))
    report.findings.append(constant_reward_groups(flat))
    report.findings.append(
        Finding(Check.COMPLETION_BOUNDARIES, "skip", "a samples file carries no weights versions")
    )
    report.findings.append(
        Finding(Check.RE_RENDERING, "skip", "a samples file carries no conversation to re-render")
    )
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
) -> CheckReport:
    """Check a trajectory store or a JSONL samples hand-off; the kind is detected.

    ``reference`` is the trajectory store a samples file was made from;
    ``text_trainer`` fails samples whose decoded text re-tokenizes differently.
    """
    from agentenvs.rollout.collect.store import read_store

    path = Path(path)
    if file_kind(path) == "trajectories":
        records = read_store(path).latest()  # superseded failures do not count
        return check_records(
            records,
            source=str(path),
            tokenizer=tokenizer,
            current_version=current_version,
            max_staleness=max_staleness,
            text_trainer=text_trainer,
        )
    from agentenvs.rollout.trainers.jsonl.handoff import sample_from_json

    samples, extras = [], []
    for line in _load_lines(path):
        # Lengths are checked by the report, not refused while loading.
        samples.append(sample_from_json(line, strict=False))
        extras.append(line.get("extra") or {})
    store = read_store(reference).latest() if reference is not None else None
    return check_samples(samples, extras, source=str(path), reference=store)
