"""Checks of stored records against what they say about themselves.

A record carries facts beside its trajectories: what the collector saw
(``collected``, ``collect/fingerprints.py``), each trajectory's total reward, the env
config and its hash, the run's group size, its key. Data edited after collection
(a converter that shifts logprobs, appends a token to an observation, swaps two
trajectories' rewards, writes a group twice) keeps every invariant of the data
itself, but no longer agrees with those facts. Each check here names the first
record, trajectory, sample and token (or turn) that disagrees, and says "not
recorded" for stores written before a fact was kept.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from agentenvs.rollout.collect.fingerprints import (
    ACTION_DIGEST,
    ACTION_DIGEST32,
    ACTION_LENGTH,
    ADDED,
    KEPT,
    OB_DIGEST,
    READABLE_FINGERPRINTS,
    REWARD,
    TRAINED,
    digest_action,
    digest_action32,
    digest_ids,
    observation_split,
)
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.data.samples import TrainingSample
from agentenvs.rollout.inspect.findings import Check, Finding
from agentenvs.rollout.inspect.groups import FirstFailure, GroupView


def _where(record: GroupRecord, t: int, sample: int, turn: int) -> str:
    return f"group {record.key} traj {t} sample {sample} turn {turn}"


def _observation_problem(kept: int, new: Sequence[int], want: Sequence[Any]) -> str | None:
    if (kept, len(new)) != (want[KEPT], want[ADDED]):
        return (
            f"the observation adds {len(new)} tokens to {kept} kept, but {want[ADDED]} to "
            f"{want[KEPT]} were collected: not what the policy saw"
        )
    if digest_ids(new) != want[OB_DIGEST]:
        return "the observation's tokens differ from the ones collected: not what the policy saw"
    return None


NO_LOGPROBS_CLAIMED = (
    "has_logprobs is true but the policy gave no logprobs: its 0.0s would be read as the "
    "sampler's (probability 1)"
)


def _action_problem(
    tokens: Sequence[int],
    logprobs: Sequence[float] | None,
    want: Sequence[Any],
    *,
    float32: bool = False,
) -> str | None:
    """Why an action is not the one collected. ``float32``: the form holds logprobs at
    float32 (a verl batch, Tinker datums), compared with the record's float32 digest."""
    if (
        len(tokens) == want[ACTION_LENGTH]
        and digest_action(tokens, logprobs) == want[ACTION_DIGEST]
    ):
        return None
    if (
        float32
        and len(want) > ACTION_DIGEST32
        and len(tokens) == want[ACTION_LENGTH]
        and digest_action32(tokens, logprobs) == want[ACTION_DIGEST32]
    ):
        return None
    return (
        "the sampled ids or logprobs differ from the ones collected: shifted or edited after "
        "sampling"
    )


def _trajectory_problem(
    record: GroupRecord, t: int, traj: Any, recorded: dict[str, Any]
) -> Finding | None:
    """The first turn of ``traj`` that is not what the collector recorded."""
    turns = recorded.get("turns") or []
    if len(turns) != len(traj.transitions):
        return Finding(
            Check.FIXED_TRAJECTORY,
            "fail",
            f"{len(traj.transitions)} turns but {len(turns)} were collected",
            f"group {record.key} traj {t}",
        )
    context: list[int] = []
    sample = -1
    for turn, (tr, want) in enumerate(zip(traj.transitions, turns, strict=True)):
        kept = observation_split(context, tr.ob)
        sample += kept == 0
        new = tr.ob[kept:]
        where = _where(record, t, sample, turn)
        if problem := _observation_problem(kept, new, want):
            span = (kept, kept + max(len(new), want[ADDED]) - 1)
            return Finding(Check.FIXED_TRAJECTORY, "fail", problem, f"{where} token {kept}", span)
        if problem := _action_problem(tr.ac.tokens, tr.ac.logprobs, want):
            start = kept + len(new)
            span = (start, start + max(len(tr.ac.tokens), want[ACTION_LENGTH]) - 1)
            return Finding(Check.FIXED_TRAJECTORY, "fail", problem, f"{where} token {start}", span)
        if not math.isclose(float(tr.reward), float(want[REWARD]), rel_tol=1e-9, abs_tol=1e-12):
            return Finding(
                Check.LOSS_INPUTS,
                "fail",
                f"step reward {tr.reward:.6g} but {want[REWARD]:.6g} was collected: rewards "
                "moved between trajectories or turns",
                where,
            )
        context = list(tr.ob) + list(tr.ac.tokens)
    if sample + 1 != int(recorded.get("samples", sample + 1)):
        return Finding(
            Check.RE_RENDERING,
            "fail",
            f"cuts into {sample + 1} samples but {recorded['samples']} were collected",
            f"group {record.key} traj {t}",
        )
    return None


def _collected_problem(record: GroupRecord) -> Finding | None:
    """The first place ``record`` departs from what the collector recorded."""
    assert record.group is not None
    recorded = record.collected or {}
    kept = recorded.get("trajectories") or []
    trajectories = record.group.trajectories
    if len(kept) != len(trajectories):
        return Finding(
            Check.FIXED_TRAJECTORY,
            "fail",
            f"{len(trajectories)} trajectories but {len(kept)} were collected",
            f"group {record.key}",
        )
    for t, (traj, want) in enumerate(zip(trajectories, kept, strict=True)):
        problem = _trajectory_problem(record, t, traj, want)
        if problem is not None:
            return problem
    group_rewards = [float(r) for r in record.group.group_rewards]
    collected = [float(r) for r in recorded.get("group_rewards", group_rewards)]
    if group_rewards != collected:
        t = next(
            (i for i, (a, b) in enumerate(zip(group_rewards, collected, strict=False)) if a != b),
            min(len(group_rewards), len(collected)),
        )
        return Finding(
            Check.LOSS_INPUTS,
            "fail",
            f"group rewards {group_rewards} but {collected} were collected",
            f"group {record.key} traj {t}",
        )
    return None


class CollectedCheck:
    """Each trajectory is what the collector recorded when it made the group."""

    def __init__(self) -> None:
        self.checked = self.unrecorded = 0
        self.first = FirstFailure()

    def add(self, view: GroupView) -> None:
        self.add_record(view.record)

    def add_record(self, record: GroupRecord) -> None:
        if (record.collected or {}).get("version") not in READABLE_FINGERPRINTS:
            self.unrecorded += 1
            return
        self.checked += 1
        if not self.first.found:
            self.first.keep(_collected_problem(record))

    def findings(self) -> list[Finding]:
        if self.first.finding is not None:
            return [self.first.finding]
        if not self.checked:
            return [
                Finding(
                    Check.FIXED_TRAJECTORY,
                    "skip",
                    "not recorded: the store predates collection fingerprints, so observation "
                    "lengths, sampled logprobs and rewards are not compared with collection",
                )
            ]
        detail = (
            f"{self.checked} groups are what the collector recorded (observations, sampled ids "
            "and logprobs, step rewards, samples per trajectory)"
        )
        if self.unrecorded:
            detail += f"; {self.unrecorded} groups predate the record (not recorded)"
        return [Finding(Check.FIXED_TRAJECTORY, "pass", detail)]


def check_collected(records: Sequence[GroupRecord]) -> list[Finding]:
    """:class:`CollectedCheck` over a list of ok records."""
    check = CollectedCheck()
    for record in records:
        check.add_record(record)
    return check.findings()


def _config_hash(config: dict[str, Any]) -> str:
    """``EnvConfig.config_hash`` of a stored config dump (``envs/config.py``)."""
    dumped = dict(config)
    if dumped.get("preset") is None:
        dumped.pop("preset", None)
    return hashlib.sha256(json.dumps(dumped, sort_keys=True).encode()).hexdigest()[:16]


def _facts_problem(record: GroupRecord) -> Finding | None:
    assert record.group is not None
    stored = record.stored_total_rewards
    if stored is not None:
        steps = record.group.total_rewards()
        for t, (got, want) in enumerate(zip(stored, steps, strict=False)):
            if not math.isclose(float(got), want, rel_tol=1e-9, abs_tol=1e-9):
                return Finding(
                    Check.LOSS_INPUTS,
                    "fail",
                    f"stored total reward {got:.6g} but the steps and group reward sum to "
                    f"{want:.6g}",
                    f"group {record.key} traj {t}",
                )
        if len(stored) != len(steps):
            return Finding(
                Check.LOSS_INPUTS,
                "fail",
                f"{len(stored)} stored total rewards for {len(steps)} trajectories",
                f"group {record.key}",
            )
    env = record.provenance.get("env") or {}
    if isinstance(env.get("config"), dict) and env.get("config_sha256"):
        again = _config_hash(env["config"])
        if again != env["config_sha256"]:
            return Finding(
                Check.FIXED_INPUT,
                "fail",
                f"env config hashes to {again}, but config_sha256 says {env['config_sha256']}: "
                "the config was edited after collection",
                f"group {record.key}",
            )
    size = record.run.get("group_size")
    tree = record.extra.get("tree")
    if isinstance(size, int) and not tree and len(record.group.trajectories) != size:
        return Finding(
            Check.FIXED_INPUT,
            "fail",
            f"{len(record.group.trajectories)} trajectories in a run of group size {size}",
            f"group {record.key}",
        )
    return None


class RecordFactsCheck:
    """Stored totals, config hashes and group sizes agree with what they summarise."""

    def __init__(self) -> None:
        self.sizes: Counter[int] = Counter()
        self.first = FirstFailure()

    def add(self, view: GroupView) -> None:
        assert view.record.group is not None
        self.sizes[len(view.record.group.trajectories)] += 1
        if not self.first.found:
            self.first.keep(_facts_problem(view.record))

    def findings(self) -> list[Finding]:
        if self.first.finding is not None:
            return [self.first.finding]
        detail = f"stored totals, config hashes and group sizes ({dict(self.sizes)}) agree"
        return [Finding(Check.FIXED_INPUT, "pass", detail)]


Excused = Callable[[TrainingSample, int], bool]
"""Whether a stated off-policy rule takes token ``i`` of a sample out of the loss."""


def _sample_problem(
    s: TrainingSample, excused: Excused | None = None
) -> tuple[int | None, str, tuple[int, int] | None] | None:
    """Where hand-off sample ``s`` departs from the turns collected for it; a trained
    token the stated rule masks (``excused``) may have mask 0."""
    assert s.collected is not None
    pos = 0
    n = len(s.tokens)
    for turn, want in enumerate(s.collected.get("turns") or []):
        new = s.tokens[pos : pos + want[ADDED]]
        # Inside a sample the context before a turn is the sample so far: what the
        # collector recorded as kept is this position.
        if problem := _observation_problem(pos, new, want):
            return pos, f"turn {turn}: {problem}", (pos, pos + want[ADDED] - 1)
        if any(s.loss_mask[pos : pos + want[ADDED]]):
            at = pos + s.loss_mask[pos : pos + want[ADDED]].index(1)
            return (
                at,
                (
                    f"turn {turn}: loss mask covers an observation token: an environment token is "
                    "being trained on"
                ),
                None,
            )
        pos += want[ADDED]
        end = pos + want[ACTION_LENGTH]
        logprobs: Sequence[float] | None = s.logprobs[pos:end]
        if not any(logprobs) and digest_action(s.tokens[pos:end], None) == want[ACTION_DIGEST]:
            # The policy gave no logprobs (collected as None); 0.0 stands in in the sample,
            # which must then say so, or a trainer reads the zeros as the sampler's.
            if s.has_logprobs and end > pos:  # an empty action does not clear the flag
                return pos, f"turn {turn}: {NO_LOGPROBS_CLAIMED}", (pos, end - 1)
            logprobs = None
        # A hand-off may hold logprobs at float32 (verl, Tinker): equal at that precision.
        if problem := _action_problem(s.tokens[pos:end], logprobs, want, float32=True):
            return pos, f"turn {turn}: {problem}", (pos, end - 1)
        if s.loss_mask[pos:end] != [int(want[TRAINED])] * (end - pos):
            wrong = [
                pos + i
                for i, m in enumerate(s.loss_mask[pos:end])
                if m != int(want[TRAINED])
                and not (m == 0 and excused is not None and excused(s, pos + i))
            ]
            if wrong:
                at = wrong[0]
                return at, f"turn {turn}: loss mask {s.loss_mask[at]} on a sampled token", None
        pos = end
    if pos != n:
        return pos, f"{n - pos} tokens after the last collected turn", (pos, n - 1)
    reward = float(s.collected.get("reward", s.reward))
    if not math.isclose(s.reward, reward, rel_tol=1e-6, abs_tol=1e-7):  # float32 forms
        return (
            None,
            (
                f"reward {s.reward:.6g} but the trajectory earned {reward:.6g} when collected: "
                "rewards moved between trajectories"
            ),
            None,
        )
    return None


def check_samples_collected(
    samples: Sequence[TrainingSample], excused: Excused | None = None
) -> Finding:
    """Each hand-off sample that carries its collection record (written from a store
    that had one) is what was collected: tokens, logprobs, mask, reward. ``excused``:
    the tokens a stated off-policy rule masks (:mod:`.token_version_checks`)."""
    with_record = [s for s in samples if s.collected]
    for s in with_record:
        problem = _sample_problem(s, excused)
        if problem is not None:
            pos, detail, span = problem
            where = f"group {s.group_index} traj {s.traj_index} sample {s.sample_index}"
            check = Check.LOSS_INPUTS if pos is None else Check.FIXED_TRAJECTORY
            at = where if pos is None else f"{where} token {pos}"
            return Finding(check, "fail", detail, at, span)
    if not with_record:
        return Finding(
            Check.FIXED_TRAJECTORY,
            "skip",
            "not recorded: no sample carries its collection record (pass --store to compare)",
        )
    return Finding(
        Check.FIXED_TRAJECTORY,
        "pass",
        f"{len(with_record)} of {len(samples)} samples are what was collected (tokens, "
        "logprobs, mask, reward)",
    )
