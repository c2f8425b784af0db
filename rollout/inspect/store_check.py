"""``check`` on a trajectory store, one group at a time.

The store is read line by line: each ok group is cut into its samples once and handed
to every check (:class:`~agentenvs.rollout.inspect.groups.GroupCheck`), then dropped,
so memory is bounded by the largest group, not the store. What a check needs from
the whole store (the first settings seen, counts, the first offender) it keeps as it
goes. A rerun appends a new record for a group that failed; that failure is not
counted once a later ok record replaces it, and a second ok record for one group is
itself a failure (a line-by-line reader trains on both).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.data.samples import TrainingSample
from agentenvs.rollout.inspect.codec import Codec
from agentenvs.rollout.inspect.episode_checks import EpisodeEndsCheck
from agentenvs.rollout.inspect.findings import Check, CheckReport, Finding, health
from agentenvs.rollout.inspect.groups import FirstFailure, GroupCheck, GroupView
from agentenvs.rollout.inspect.image_checks import check_images
from agentenvs.rollout.inspect.options import ROUND_TRIP_SAMPLES, CheckOptions
from agentenvs.rollout.inspect.record_checks import CollectedCheck, RecordFactsCheck
from agentenvs.rollout.inspect.rescore import Rescorer, check_rescore
from agentenvs.rollout.inspect.reward_checks import RewardsCheck, compare_seen, reward_identities
from agentenvs.rollout.inspect.sample_checks import (
    check_estimator,
    check_sample_alignment,
    check_sample_loss_inputs,
    first_logprob_problem,
    is_per_step,
)
from agentenvs.rollout.inspect.segment_checks import SEGMENT_LOG, check_segments
from agentenvs.rollout.inspect.token_checks import (
    ObservationControlsCheck,
    SplitPointsCheck,
    TextRoundTripCheck,
    TokenIdsCheck,
)
from agentenvs.rollout.inspect.tool_checks import ToolsCheck
from agentenvs.rollout.inspect.tree_checks import TreesCheck
from agentenvs.rollout.inspect.version_checks import DriftCheck, VersionsCheck
from agentenvs.rollout.weights.drift import DriftReport

_FIXED_INPUT_CHANGES = 20
"""Setting changes reported, at most (a store that flips every line names the first)."""


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


class FixedInputCheck:
    """One tokenizer, template, renderer, protocol, env config, sampling setting."""

    def __init__(self) -> None:
        self.first: dict[str, Any] | None = None
        self.groups = 0
        self.changes: list[Finding] = []

    def add(self, view: GroupView) -> None:
        provenance = view.record.provenance
        if not provenance.get("tokenizer"):
            return
        self.groups += 1
        current = _fingerprint_fields(provenance)
        if self.first is None:
            self.first = current
            return
        for name, value in current.items():
            if value != self.first[name] and len(self.changes) < _FIXED_INPUT_CHANGES:
                detail = f"{name} changed from {self.first[name]} to {value}"
                self.changes.append(Finding(Check.FIXED_INPUT, "fail", detail, view.where()))
                self.first[name] = value  # report each change once

    def findings(self) -> list[Finding]:
        if not self.groups:
            detail = "no provenance recorded: settings not checked"
            return [Finding(Check.FIXED_INPUT, "warn", detail)]
        if self.changes:
            return self.changes
        detail = (
            "one tokenizer, template, renderer, env config and sampling setting in "
            f"{self.groups} groups"
        )
        return [Finding(Check.FIXED_INPUT, "pass", detail)]


class LogprobCheck:
    """One logprob per sampled token, each a finite number <= 0: a NaN poisons the loss
    and a positive value is no probability (the collector refuses both from a policy,
    so in a store they are corruption)."""

    def __init__(self) -> None:
        self.first = FirstFailure()

    def add(self, view: GroupView) -> None:
        if self.first.found:
            return
        for t, traj in view.trajectories():
            for turn, tr in enumerate(traj.transitions):
                lp = tr.ac.logprobs
                where = view.where(t, turn)
                if lp is not None and len(lp) != len(tr.ac.tokens):
                    detail = f"{len(tr.ac.tokens)} sampled tokens but {len(lp)} logprobs"
                    self.first.keep(Finding(Check.FIXED_TRAJECTORY, "fail", detail, where))
                    return
                if lp and (found := first_logprob_problem(lp)) is not None:
                    where = f"{where} token {found[0]}"
                    self.first.keep(Finding(Check.FIXED_TRAJECTORY, "fail", found[1], where))
                    return

    def findings(self) -> list[Finding]:
        if self.first.finding is not None:
            return [self.first.finding]
        detail = "every action has one finite logprob <= 0 per token"
        return [Finding(Check.FIXED_TRAJECTORY, "pass", detail)]


class ActionTextCheck:
    """Decoding each sampled span reproduces the text the environment parsed; spans
    without the record are counted (and named) rather than passed over."""

    def __init__(self, tokenizer: Any) -> None:
        self.codec = Codec.of(tokenizer)
        self.checked = self.missing = 0
        self.first_missing = ""
        self.first = FirstFailure()

    def add(self, view: GroupView) -> None:
        if self.first.found:
            return
        spans: list[tuple[str, str, list[int]]] = []
        for t, traj in view.trajectories():
            for turn, tr in enumerate(traj.transitions):
                recorded = tr.logs.get("action_text")
                if recorded is None:
                    self.missing += 1
                    self.first_missing = self.first_missing or view.where(t, turn)
                else:
                    spans.append((view.where(t, turn), str(recorded), tr.ac.tokens))
        decoded = self.codec.decode_batch([tokens for _, _, tokens in spans])
        self.checked += len(spans)
        for (where, recorded, _), text in zip(spans, decoded, strict=True):
            if text != recorded:
                at = next(
                    (i for i, (a, b) in enumerate(zip(text, recorded, strict=False)) if a != b),
                    min(len(text), len(recorded)),
                )
                detail = (
                    f"sampled tokens decode to {text[at : at + 30]!r} where the env read "
                    f"{recorded[at : at + 30]!r} (character {at})"
                )
                self.first.keep(Finding(Check.FIXED_TRAJECTORY, "fail", detail, where))
                return

    def findings(self) -> list[Finding]:
        if self.first.finding is not None:
            return [self.first.finding]
        if not self.checked:
            detail = "no recorded action text to compare"
            return [Finding(Check.FIXED_TRAJECTORY, "warn", detail)]
        if self.missing:
            detail = (
                f"{self.checked} sampled spans decode to the text read, but {self.missing} carry "
                "no action text (not compared)"
            )
            return [Finding(Check.FIXED_TRAJECTORY, "warn", detail, f"first: {self.first_missing}")]  # fmt: skip
        detail = f"{self.checked} sampled spans decode to the text read"
        return [Finding(Check.FIXED_TRAJECTORY, "pass", detail)]


class SampleCheck:
    """A check of samples alone (``sample_checks.py``), run group by group: the first
    failure is kept; the pass finding of the last group stands for all."""

    def __init__(self, judge: Callable[[Sequence[TrainingSample], Sequence[str], GroupView], Finding]) -> None:  # fmt: skip
        self.judge = judge
        self.samples = 0
        self.last: Finding | None = None
        self.first = FirstFailure()

    def add(self, view: GroupView) -> None:
        if self.first.found or not view.samples:
            return
        self.samples += len(view.samples)
        self.last = self.judge(view.samples, [view.key] * len(view.samples), view)
        self.first.keep(self.last)

    def findings(self) -> list[Finding]:
        if self.first.finding is not None:
            return [self.first.finding]
        return [] if self.last is None else [self.last]


class AdvantagesCheck:
    """One estimator across the store, its advantages recomputed from each group's
    rewards, and the groups without a learning signal counted (run health)."""

    def __init__(self) -> None:
        self.estimators: Counter[str] = Counter()
        self.stored = self.groups = self.constant = 0
        self.first_constant = ""
        self.estimator: dict[str, Any] | None = None
        self.note: Finding | None = None
        self.first = FirstFailure()

    def add(self, view: GroupView) -> None:
        self.groups += 1
        self.estimators[view.estimator_json] += 1
        if len(set(view.rewards)) <= 1:
            self.constant += 1
            self.first_constant = self.first_constant or view.key
        if view.record.extra.get("advantages") is None:
            return
        self.stored += 1
        self.estimator = self.estimator or view.estimator
        if not self.first.found:
            pairs = {view.key: list(zip(view.rewards, view.advantages, strict=False))}
            found = check_estimator(pairs, view.estimator, "group")
            self.first.keep(found)
            if found.status == "warn" and self.note is None:
                self.note = found

    def findings(self) -> list[Finding]:
        found = []
        if len(self.estimators) > 1:
            detail = f"{len(self.estimators)} different advantage estimators"
            found.append(Finding(Check.LOSS_INPUTS, "fail", detail))
        if self.first.finding is not None:
            found.append(self.first.finding)
        elif not self.stored:
            found.append(Finding(Check.LOSS_INPUTS, "warn", "no advantages stored"))
        elif self.note is not None:
            found.append(self.note)
        else:
            estimator = self.estimator or {}
            normalised = ", std-normalised" if estimator.get("normalize_std") else ""
            detail = (
                f"advantages match the recorded estimator ({estimator.get('estimator')}"
                f"{normalised}) in {self.stored} groups"
            )
            found.append(Finding(Check.LOSS_INPUTS, "pass", detail))
        if self.constant:
            detail = (
                f"{self.constant} of {self.groups} groups have one reward for every trajectory "
                "(zero advantage: no learning signal)"
            )
            where = f"first: group {self.first_constant}"
            found.append(health(Check.LOSS_INPUTS, "warn", detail, where))
        else:
            found.append(health(Check.LOSS_INPUTS, "pass", "no constant-reward groups"))
        return found


class Outcomes:
    """Which groups' latest outcome is ok or failed, and groups stored ok twice."""

    def __init__(self) -> None:
        self.ok: dict[tuple[str, str], tuple[int, str]] = {}
        self.failed: dict[tuple[str, str], int] = {}
        self.lines = 0
        self.duplicate: Finding | None = None

    def admit(self, record: GroupRecord, digest: str) -> bool:
        """Whether ``record`` (whose stored line has ``digest``) is an ok group to check:
        the first ok record of its slot."""
        self.lines += 1
        slot = (str(record.run.get("fingerprint", "")), record.key)
        if record.status != "ok" or record.group is None:
            if slot not in self.ok:
                self.failed[slot] = self.lines
            return False
        if slot in self.ok:
            if self.duplicate is None:
                line, first = self.ok[slot]
                how = "an exact duplicate of" if first == digest else "a second ok record for the key of"  # fmt: skip
                detail = (
                    f"record {self.lines} is {how} record {line}: a reader that goes line by "
                    "line trains on the group twice"
                )
                self.duplicate = Finding(Check.FIXED_INPUT, "fail", detail, f"group {record.key}")
            return False
        self.failed.pop(slot, None)
        self.ok[slot] = (self.lines, digest)
        return True

    def finding(self) -> Finding:
        if self.duplicate is not None:
            return self.duplicate
        return Finding(Check.FIXED_INPUT, "pass", f"{len(self.ok)} groups, each stored once")


class KeptRecordsCheck:
    """A check over whole records that only some stores have (gateway captures, image
    runs): it keeps just the records ``wanted`` picks, so a store without them costs
    nothing, and judges them together at the end (``judge(records)``)."""

    def __init__(
        self,
        wanted: Callable[[GroupRecord], bool],
        judge: Callable[[list[GroupRecord]], list[Finding]],
    ) -> None:
        self.wanted, self.judge = wanted, judge
        self.kept: list[GroupRecord] = []

    def add(self, view: GroupView) -> None:
        if self.wanted(view.record):
            self.kept.append(view.record)

    def findings(self) -> list[Finding]:
        return self.judge(self.kept) if self.kept else []


def _has_segments(record: GroupRecord) -> bool:
    trajectories = record.group.trajectories if record.group else []
    return any(SEGMENT_LOG in tr.logs for traj in trajectories for tr in traj.transitions)


def _has_images(record: GroupRecord) -> bool:
    trajectories = record.group.trajectories if record.group else []
    return any(tr.images for traj in trajectories for tr in traj.transitions)


def _checks(
    tokenizer: Any,
    options: CheckOptions,
    drift: Sequence[DriftReport] | None,
    rescorer: Rescorer | None,
    source: str = "",
) -> list[GroupCheck]:
    """Every check, in the order the report lists their findings."""
    checks: list[GroupCheck] = [
        FixedInputCheck(),
        RecordFactsCheck(),
        RewardsCheck(),
        LogprobCheck(),
    ]
    checks.append(SampleCheck(lambda s, k, v: check_sample_alignment(s, k)))
    if tokenizer is not None:
        checks += [ActionTextCheck(tokenizer), TokenIdsCheck(tokenizer), ObservationControlsCheck(tokenizer)]  # fmt: skip
    checks += [CollectedCheck(), EpisodeEndsCheck(tokenizer)]
    if options.replay:
        from agentenvs.rollout.inspect.replay import ReplayCheck

        checks.append(ReplayCheck(tokenizer, options))
    if rescorer is not None:
        checks.append(SampleCheck(lambda s, k, v: check_rescore(s, rescorer, k, temperature=_temperature(v))))  # fmt: skip
    checks.append(
        SampleCheck(lambda s, k, v: check_sample_loss_inputs(s, k, per_step=is_per_step(v.estimator)))
    )  # fmt: skip
    checks += [AdvantagesCheck(), VersionsCheck(options)]
    if drift is not None:
        checks.append(DriftCheck(drift))
    checks += [TreesCheck(), ToolsCheck(tokenizer, options.max_tool_parse_failures)]
    checks.append(KeptRecordsCheck(_has_segments, check_segments))  # gateway captures only
    checks.append(  # image runs only: the pixels lie beside the store (``<store>.images/``)
        KeptRecordsCheck(_has_images, lambda kept: check_images(kept, source or None))
    )
    checks.append(SplitPointsCheck(tokenizer))
    if tokenizer is not None:
        limit = None if options.text_trainer else ROUND_TRIP_SAMPLES
        checks.append(TextRoundTripCheck(tokenizer, text_trainer=options.text_trainer, limit=limit))
    return checks


def _temperature(view: GroupView) -> float | None:
    sampling = view.record.provenance.get("sampling") or {}
    value = sampling.get("temperature")
    return None if value is None else float(value)


Line = tuple[GroupRecord, str]
"""A stored record and a digest of its line (what tells an exact duplicate)."""


def digested(records: Iterable[GroupRecord]) -> Iterable[Line]:
    """Records held in memory, each with the digest of its stored form."""
    for record in records:
        text = json.dumps(record.to_json(), sort_keys=True).encode()
        yield record, hashlib.sha256(text).hexdigest()


def check_stream(
    lines: Iterable[Line],
    *,
    source: str = "",
    tokenizer: Any = None,
    options: CheckOptions | None = None,
    drift: Sequence[DriftReport] | None = None,
    rescorer: Rescorer | None = None,
    against: tuple[str, Iterable[GroupRecord]] | None = None,
) -> CheckReport:
    """Every check over a store's records in file order (see the module docstring);
    ``against``, another store (its name and records), has its reward code compared
    with this one's."""
    options = options or CheckOptions()
    report = CheckReport(source, "trajectories")
    outcomes = Outcomes()
    checks = _checks(tokenizer, options, drift, rescorer, source)
    samples = 0
    for record, digest in lines:
        if not outcomes.admit(record, digest):
            continue
        view = GroupView.of(record, len(outcomes.ok) - 1)
        samples += len(view.samples)
        for check in checks:
            check.add(view)
    ok, failed = len(outcomes.ok), len(outcomes.failed)
    report.stats = {"groups": ok + failed, "ok": ok, "failed": failed, "samples": samples}
    report.findings.append(outcomes.finding())
    if not ok:
        detail = f"no ok group in {ok + failed}: nothing to train on"
        report.findings.append(Finding(Check.FIXED_INPUT, "fail", detail))
    for check in checks:
        report.findings += check.findings()
        if against is not None and isinstance(check, RewardsCheck):
            name, others = against
            report.findings += compare_seen(check.seen, reward_identities(others), name)
    if tokenizer is None:
        detail = "no tokenizer (pass --tokenizer) to re-tokenize with"
        report.findings.append(Finding(Check.RE_RENDERING, "skip", detail))
    if options.health == "warn":
        report.downgrade_health()
    return report


def read_lines(path: str | Path, problems: list[Any] | None = None) -> Iterable[Line]:
    """A store's records in file order, read one line at a time, each with the digest
    of its bytes. Torn lines are skipped (each added to ``problems``, a
    :class:`~agentenvs.rollout.collect.store.StoreProblem`); a line that is no record
    raises ``StoreError`` naming it."""
    from agentenvs.rollout.collect.store import StoreProblem, open_store, parse_line

    path = Path(path)
    handle = open_store(path, missing_ok=False)
    assert handle is not None
    with handle:
        for number, raw in enumerate(handle, start=1):
            parsed = parse_line(path, number, raw)
            if isinstance(parsed, GroupRecord):
                yield parsed, hashlib.sha256(raw.strip()).hexdigest()
            elif isinstance(parsed, StoreProblem) and problems is not None:
                problems.append(parsed)
