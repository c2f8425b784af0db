"""Checks of training samples: per-token lists, loss inputs, and a hand-off against its store.

A sample is what a trainer consumes (tokens, loss mask, logprobs, advantages). The
checks here judge samples alone (lists line up, logprobs are log probabilities on
sampled tokens only, advantages sit on trained tokens and follow the recorded
estimator, every sample of a trajectory agrees on its reward and advantage, no
sample appears twice) and, given the store a hand-off was made from, that each
sample is the store's: same tokens, mask, logprobs, reward and advantage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.data.advantages import ESTIMATORS, STEP_ESTIMATORS, group_advantages
from agentenvs.rollout.data.off_policy import OffPolicyRule, apply_rule
from agentenvs.rollout.data.samples import TrainingSample, trajectory_to_samples
from agentenvs.rollout.inspect.findings import Check, Finding

_TOLERANCE = 1e-6

LOGPROB_ROUNDING = 1e-4
"""How far above 0 an engine's rounding may put a logprob (log p <= 0 exactly)."""


def logprob_problem(value: Any) -> str | None:
    """Why ``value`` is no sampler logprob (a NaN poisons the loss, a positive value is
    no probability), or None."""
    if not isinstance(value, int | float) or not math.isfinite(value):
        return f"logprob {value!r} is not a finite number"
    if value > LOGPROB_ROUNDING:
        return f"logprob {value:+.3g} is above 0 (no probability)"
    return None


def _sample_where(sample: TrainingSample, position: int | None = None, key: str = "") -> str:
    head = (
        f"group {key or sample.group_index} traj {sample.traj_index} sample {sample.sample_index}"
    )
    return head if position is None else f"{head} token {position}"


def _numbers(values: Sequence[Any]) -> np.ndarray | None:
    """``values`` as a float array, or None when one is no number (then checked one by one)."""
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        return None


def first_logprob_problem(values: Sequence[Any]) -> tuple[int, str] | None:
    """The first value that is no sampler logprob (:func:`logprob_problem`), vectorised."""
    array = _numbers(values)
    if array is not None and array.ndim == 1:
        bad = np.flatnonzero(~np.isfinite(array) | (array > LOGPROB_ROUNDING))
        if not bad.size:
            return None
        values = values[int(bad[0]) :]
        offset = int(bad[0])
    else:
        offset = 0
    for pos, value in enumerate(values):
        if problem := logprob_problem(value):
            return offset + pos, problem
    return None


def _alignment_problem(s: TrainingSample) -> tuple[int | None, str] | None:
    n = len(s.tokens)
    lengths = {"loss_mask": len(s.loss_mask), "logprobs": len(s.logprobs), "advantages": len(s.advantages)}  # fmt: skip
    bad = {k: v for k, v in lengths.items() if v != n}
    if bad:
        return None, f"{n} tokens but {bad}: per-token lists do not line up"
    mask = _numbers(s.loss_mask)
    if mask is None or np.any((mask != 0) & (mask != 1)):
        pos = next(i for i, m in enumerate(s.loss_mask) if m not in (0, 1))
        return pos, f"mask value {s.loss_mask[pos]!r}"
    trained = mask == 1
    found = first_logprob_problem([s.logprobs[i] for i in np.flatnonzero(trained)])
    if found is not None:
        pos = int(np.flatnonzero(trained)[found[0]])
        return pos, found[1]
    logprobs = _numbers(s.logprobs)
    if logprobs is not None:
        off = ~trained & (logprobs != 0.0)
        if s.token_versions and len(s.token_versions) == n:
            # A token stamped with the version that sampled it was sampled: an
            # off-policy rule may leave it out of the loss with its behaviour logprob.
            off &= np.array([v is None for v in s.token_versions], dtype=bool)
        stray = np.flatnonzero(off)
        if stray.size:
            pos = int(stray[0])
            return pos, (
                f"logprob {s.logprobs[pos]:.4g} on a token outside the loss mask: logprobs are "
                "shifted or the mask misses a sampled token"
            )
    in_loss = np.flatnonzero(trained)
    if in_loss.size and in_loss[0] < s.prompt_length:
        return int(in_loss[0]), (
            f"loss mask covers a prompt token (the prompt has {s.prompt_length} tokens)"
        )
    if n and s.loss_mask[0] == 1:
        return 0, "the first token is in the loss mask, but nothing predicts it (no context)"
    return None


def check_sample_alignment(samples: Sequence[TrainingSample], keys: Sequence[str] = ()) -> Finding:
    """Per-token lists line up, and nothing but sampled tokens carries loss or logprob."""
    for i, s in enumerate(samples):
        problem = _alignment_problem(s)
        if problem is not None:
            pos, why = problem
            key = keys[i] if i < len(keys) else ""
            return Finding(Check.FIXED_TRAJECTORY, "fail", why, _sample_where(s, pos, key))
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


def _store_samples(
    records: Sequence[GroupRecord], estimator: dict[str, Any] | None
) -> dict[tuple[int, int, int], TrainingSample]:
    """The samples a store's ok groups cut into, by (group index, trajectory, sample), with
    each trajectory's total reward and stored advantage: NaN where none is stored or the
    hand-off says it used another estimator (its advantages are recomputed from the
    rewards instead)."""
    ok = [r for r in records if r.status == "ok" and r.group is not None]
    derived: dict[tuple[int, int, int], TrainingSample] = {}
    for g, record in enumerate(ok):
        assert record.group is not None
        rewards = record.group.total_rewards()
        same = estimator is not None and record.extra.get("advantage_estimator") == estimator
        stored = (same and record.extra.get("advantages")) or [math.nan] * len(rewards)
        for t, traj in enumerate(record.group.trajectories):
            advantage = float(stored[t]) if t < len(stored) else math.nan
            try:
                cut = trajectory_to_samples(
                    traj, advantage, group_index=g, traj_index=t, reward=rewards[t]
                )
            except ValueError:  # logprobs that do not fit: the store's own check says so
                continue
            for sample in cut:
                derived[(g, t, sample.sample_index)] = sample
    return derived


def _close(a: float, b: float) -> bool:
    """Equal as a converter keeps them (float32 and back, JSON)."""
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6) or (math.isnan(a) and math.isnan(b))


def _against(s: TrainingSample, want: TrainingSample) -> tuple[int | None, str] | None:
    """How sample ``s`` differs from the store's ``want``: (token or None, why)."""
    if s.tokens != want.tokens:
        pos = _first_index_differing(s.tokens, want.tokens)
        return pos, (
            f"tokens differ from the store's ({len(s.tokens)} here, {len(want.tokens)} "
            "there): not what the policy saw and sampled"
        )
    if s.loss_mask != want.loss_mask:
        pos = _first_index_differing(s.loss_mask, want.loss_mask)
        if s.loss_mask[pos] == 1:
            return pos, (
                "loss mask covers a token the policy did not sample: an environment token "
                "is being trained on"
            )
        return pos, "loss mask misses a token the policy sampled"
    for pos, (got, lp) in enumerate(zip(s.logprobs, want.logprobs, strict=True)):
        if not _close(got, lp):
            return pos, f"logprob {got:.6g} but the sampler's was {lp:.6g}"
    if s.has_logprobs and not want.has_logprobs:
        pos = s.loss_mask.index(1) if 1 in s.loss_mask else None
        return pos, (
            "has_logprobs is true but the store's policy gave no logprobs: its 0.0s would be "
            "read as the sampler's (probability 1)"
        )
    if not _close(s.reward, want.reward):
        return None, f"reward {s.reward:.6g} but the store's trajectory earned {want.reward:.6g}"
    if not math.isnan(want.advantage) and not _close(s.advantage, want.advantage):
        return None, f"advantage {s.advantage:.6g} but the store holds {want.advantage:.6g}"
    return None


def check_samples_against_store(
    samples: Sequence[TrainingSample],
    records: Sequence[GroupRecord],
    estimator: dict[str, Any] | None = None,
    rule: tuple[OffPolicyRule, Any] | None = None,
) -> list[Finding]:
    """Every sample of a hand-off is the store's: same tokens, mask 1 exactly on sampled
    ones, the sampler's logprobs, the trajectory's reward, and its stored advantage
    when the hand-off names the store's ``estimator``; and every sample the store
    trains on is in the hand-off (coverage both ways). ``rule``, the off-policy rule
    and trained version the hand-off states: the store's samples are masked by it
    first, so the mask must be exactly what the rule leaves.

    The store knows which tokens were sampled (each transition's action), so this
    decides what a logprob value cannot; it holds the rewards, so rewards moved
    between trajectories (with their advantages) show here; it holds every group, so
    a group a converter dropped shows here.
    """
    derived = _store_samples(records, estimator)
    if rule is not None:
        apply_rule(derived.values(), *rule)
    for s in samples:
        want = derived.get((s.group_index, s.traj_index, s.sample_index))
        if want is None:
            return [
                Finding(
                    Check.FIXED_TRAJECTORY, "fail", "a sample the store does not hold", _sample_where(s)
                )
            ]  # fmt: skip
        problem = _against(s, want)
        if problem is not None:
            pos, detail = problem
            check = Check.FIXED_TRAJECTORY if pos is not None else Check.LOSS_INPUTS
            return [Finding(check, "fail", detail, _sample_where(s, pos))]
    return [
        Finding(
            Check.FIXED_TRAJECTORY,
            "pass",
            f"{len(samples)} samples match the store's tokens, masks, logprobs, rewards and "
            "advantages",
        ),
        check_coverage(samples, derived, records),
    ]


def check_coverage(
    samples: Sequence[TrainingSample],
    derived: dict[tuple[int, int, int], TrainingSample],
    records: Sequence[GroupRecord],
) -> Finding:
    """Every sample the store trains on (one with a token in the loss) is in the
    hand-off: a group, trajectory or sample lost on the way is named by its store key."""
    present = {(s.group_index, s.traj_index, s.sample_index) for s in samples}
    trained = [slot for slot, want in derived.items() if 1 in want.loss_mask]
    missing = [slot for slot in trained if slot not in present]
    if missing:
        keys = [r.key for r in records if r.status == "ok" and r.group is not None]
        g, t, n = missing[0]
        groups = len({slot[0] for slot in missing})
        return Finding(
            Check.FIXED_TRAJECTORY,
            "fail",
            f"{len(missing)} trained samples of the store ({groups} groups) are not in the "
            "hand-off: dropped on the way to the trainer",
            f"group {keys[g] if g < len(keys) else g} traj {t} sample {n}",
        )
    return Finding(
        Check.FIXED_TRAJECTORY,
        "pass",
        f"coverage: all {len(trained)} trained samples of the store are in the hand-off",
    )


def check_sample_identity(samples: Sequence[TrainingSample], *, per_step: bool = False) -> Finding:
    """Each (group, trajectory, sample) appears once, a trajectory's samples are numbered
    0, 1, ... without a gap, and all of them carry the trajectory's one reward and
    advantage: a reader that takes the last sample's values (or trains line by line)
    is otherwise silently wrong. Under a ``per_step`` estimator only rewards must agree."""
    seen: dict[tuple[int, int, int], TrainingSample] = {}
    by_traj: dict[tuple[int, int], list[TrainingSample]] = {}
    for s in samples:
        slot = (s.group_index, s.traj_index, s.sample_index)
        if slot in seen:
            same = seen[slot] == s
            return Finding(
                Check.FIXED_TRAJECTORY,
                "fail",
                ("an exact duplicate of another line" if same else "appears twice, differently")
                + ": a reader that trains line by line trains on it twice",
                _sample_where(s),
            )
        seen[slot] = s
        by_traj.setdefault(slot[:2], []).append(s)
    for parts in by_traj.values():
        parts.sort(key=lambda x: x.sample_index)
        first = parts[0]
        for n, s in enumerate(parts):
            if s.sample_index != n:
                return Finding(
                    Check.FIXED_TRAJECTORY,
                    "fail",
                    f"sample {n} of this trajectory is missing",
                    _sample_where(s),
                )
            pairs = [("reward", s.reward, first.reward)]
            if not per_step:
                pairs.append(("advantage", s.advantage, first.advantage))
            for what, got, want in pairs:
                if not _close(got, want):
                    return Finding(
                        Check.LOSS_INPUTS,
                        "fail",
                        f"{what} {got:.6g} but sample {first.sample_index} of the same "
                        f"trajectory has {want:.6g}",
                        _sample_where(s),
                    )
    return Finding(
        Check.FIXED_TRAJECTORY,
        "pass",
        f"{len(seen)} distinct samples of {len(by_traj)} trajectories, each trajectory's "
        "samples agreeing on reward and advantage",
    )


def check_sample_token_ids(samples: Sequence[TrainingSample], vocabulary_size: int) -> Finding:
    """Every id of every sample is one the tokenizer has."""
    for s in samples:
        if s.tokens and (max(s.tokens) >= vocabulary_size or min(s.tokens) < 0):
            pos = next(i for i, t in enumerate(s.tokens) if not 0 <= t < vocabulary_size)
            what = "sampled" if s.loss_mask[pos : pos + 1] == [1] else "observation"
            return Finding(
                Check.FIXED_TRAJECTORY,
                "fail",
                f"{what} id {s.tokens[pos]} is outside the tokenizer's {vocabulary_size} ids",
                _sample_where(s, pos),
            )
    return Finding(
        Check.FIXED_TRAJECTORY, "pass", f"every id is within the {vocabulary_size}-id vocabulary"
    )


def _first_index_differing(a: Sequence[Any], b: Sequence[Any]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


PER_STEP_ESTIMATORS = frozenset({"tree_segment", *STEP_ESTIMATORS})
"""Estimators that give each step its own advantage (``data/tree_advantages.py``), so a
sample's trained tokens carry several values, one per sampled span."""


def is_per_step(estimator: dict[str, Any] | None) -> bool:
    """Whether a recorded ``advantage_estimator`` gives per-step advantages."""
    return isinstance(estimator, dict) and estimator.get("estimator") in PER_STEP_ESTIMATORS


def _masked_token_problem(s: TrainingSample) -> tuple[int, str] | None:
    mask, advantages = _numbers(s.loss_mask), _numbers(s.advantages)
    if mask is None or advantages is None or mask.shape != advantages.shape:
        return None  # reported by the alignment check
    found = np.flatnonzero((mask == 0) & (advantages != 0.0))
    if not found.size:
        return None
    pos = int(found[0])
    return pos, f"advantage {s.advantages[pos]:.4g} on a masked (non-sampled) token"


def _scalar_problem(s: TrainingSample) -> tuple[int, str] | None:
    """One advantage per trajectory: every trained token carries ``s.advantage``."""
    mask, advantages = _numbers(s.loss_mask), _numbers(s.advantages)
    if mask is None or advantages is None or mask.shape != advantages.shape:
        return None
    found = np.flatnonzero((mask == 1) & ~(np.abs(advantages - s.advantage) <= _TOLERANCE))
    if not found.size:
        return None
    pos = int(found[0])
    return pos, f"advantage {s.advantages[pos]:.4g} differs from the trajectory's {s.advantage:.4g}"


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
