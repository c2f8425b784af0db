"""Did the sampler run the weights it claims? The trainer's own pass over the batch says.

A sync's probe proves the weights once; the batch is where it matters. Every
trainer scores the sampled tokens under its current weights for the loss anyway.
For tokens the sampler stamped with the version the trainer now holds (the
on-policy part of the batch), the two logprobs must agree within the engine's
noise: a sync that silently kept the previous weights, loaded the wrong adapter
or a corrupted file shows up as drift on those very tokens, in the first step
that trains on them. Tokens from older versions (staleness the run allows) are
reported but cannot alarm: they are expected to differ.

:func:`measure_drift` is the pure function; :class:`DriftLog` appends each step's
:class:`DriftReport` to a JSONL file next to the store, which ``agentenvs check
--drift FILE`` and :func:`~agentenvs.rollout.data.training_data.samples_from_records`
(``drift=``) read to refuse records of a batch that alarmed. The thresholds are
the probe's (:class:`~.proof.Tolerance`, from the measured noise per dtype).
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.rollout.data.samples import PARSE_ERROR_MASKED_METRIC
from agentenvs.rollout.weights.proof import Tolerance
from agentenvs.rollout.weights.stamps import Version
from agentenvs.rollout.weights.token_versions import token_versions

if TYPE_CHECKING:
    from agentenvs.envs.types import Trajectory
    from agentenvs.rollout.collect.records import GroupRecord
    from agentenvs.rollout.weights.probe import ReferenceLogprobs


class DriftAlarm(AgentEnvsError, RuntimeError):
    """The trainer's logprobs on on-policy tokens say the sampler ran other weights."""


@dataclass(frozen=True)
class DriftRow:
    """One sampled sequence: its version stamp, and the two logprobs of each sampled token."""

    version: Version | None
    sampler: Sequence[float]
    trainer: Sequence[float]
    key: str | None = None
    """The record it came from, so a reader can refuse exactly the alarmed records."""
    trainer_version: Version | None = None
    """The version of the weights that computed ``trainer`` (None: the report's
    ``trainer_version``). Equal to ``version``: comparable, they must agree. A
    trainer that keeps the weights of the versions it still accepts (an async loop
    trains on batches one version behind) scores each row with its own version."""


@dataclass(frozen=True)
class VersionDrift:
    """How far sampler and trainer disagree on the tokens of one weights version."""

    version: Version | None
    tokens: int
    mean_abs: float
    rms: float
    max_abs: float
    share_over: float
    """Share of tokens whose difference is over the per-token tolerance."""
    on_policy: bool
    """Scored by the trainer with the weights of the version that sampled them:
    these must agree."""
    alarm: str | None = None
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class DriftReport:
    step: int | None
    trainer_version: Version | None
    versions: tuple[VersionDrift, ...]
    tolerance: Tolerance
    skipped: int = 0
    """Tokens left out: no sampler logprob (NaN) or no version stamp."""

    @property
    def alarm(self) -> str | None:
        return next((v.alarm for v in self.versions if v.alarm), None)

    @property
    def alarmed_keys(self) -> frozenset[str]:
        return frozenset(k for v in self.versions if v.alarm for k in v.keys)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DriftReport:
        versions = tuple(
            VersionDrift(**{**v, "keys": tuple(v.get("keys", ()))}) for v in data["versions"]
        )
        return cls(
            step=data.get("step"),
            trainer_version=data.get("trainer_version"),
            versions=versions,
            tolerance=Tolerance(**data["tolerance"]),
            skipped=int(data.get("skipped", 0)),
        )


def measure_drift(
    rows: Iterable[DriftRow],
    *,
    trainer_version: Version | None,
    tolerance: Tolerance,
    step: int | None = None,
) -> DriftReport:
    """Per weights version: mean, RMS and max |sampler - trainer|, and the share over
    the per-token tolerance; an alarm when tokens the trainer scored with the weights
    of the version that sampled them disagree beyond the noise (RMS over
    ``tolerance.rms`` or any token over ``tolerance.max``)."""
    by_version: dict[tuple[Any, bool], list[float]] = {}
    keys: dict[tuple[Any, bool], list[str]] = {}
    skipped = 0
    for row in rows:
        if len(row.sampler) != len(row.trainer):
            raise ValueError(
                f"{len(row.sampler)} sampler and {len(row.trainer)} trainer logprobs in one row"
            )
        if row.version is None:
            skipped += len(row.sampler)
            continue
        scored_by = row.trainer_version if row.trainer_version is not None else trainer_version
        slot = (row.version, scored_by == row.version)
        deltas = by_version.setdefault(slot, [])
        for a, b in zip(row.sampler, row.trainer, strict=True):
            if math.isnan(a) or math.isnan(b):
                skipped += 1
            else:
                deltas.append(abs(a - b))
        if row.key is not None and row.key not in keys.setdefault(slot, []):
            keys[slot].append(row.key)
    versions = [
        _version_drift(version, deltas, comparable, tolerance, keys.get((version, comparable), []))
        for (version, comparable), deltas in by_version.items()
    ]
    versions.sort(key=lambda v: (*_order(v.version), not v.on_policy))
    return DriftReport(step, trainer_version, tuple(versions), tolerance, skipped)


def _order(version: Any) -> tuple[int, Any]:
    return (0, version) if isinstance(version, int | float) else (1, str(version))


def _version_drift(
    version: Any, deltas: list[float], on_policy: bool, tolerance: Tolerance, keys: list[str]
) -> VersionDrift:
    if not deltas:
        return VersionDrift(version, 0, 0.0, 0.0, 0.0, 0.0, on_policy, None, tuple(keys))
    rms = math.sqrt(sum(d * d for d in deltas) / len(deltas))
    worst = max(deltas)
    alarm = None
    if on_policy and (rms > tolerance.rms or worst > tolerance.max):
        alarm = (
            f"tokens stamped with weights version {version!r} disagree with the trainer's "
            f"weights of that version: rms {rms:.3g} (tolerance {tolerance.rms:.3g}), max "
            f"{worst:.3g} (tolerance {tolerance.max:.3g}) over {len(deltas)} tokens; the "
            "sampler did not run the weights it claims"
        )
    return VersionDrift(
        version=version,
        tokens=len(deltas),
        mean_abs=sum(deltas) / len(deltas),
        rms=rms,
        max_abs=worst,
        share_over=sum(d > tolerance.max for d in deltas) / len(deltas),
        on_policy=on_policy,
        alarm=alarm,
        keys=tuple(keys),
    )


class DriftLog:
    """Each step's :class:`DriftReport`, one JSON line each (append-only)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def append(self, report: DriftReport) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(report.to_json()) + "\n")

    def read(self) -> list[DriftReport]:
        return read_drift(self.path)


def read_drift(path: str | Path) -> list[DriftReport]:
    """Every report in a drift log; a line that does not parse is an error naming it."""
    reports = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                reports.append(DriftReport.from_json(json.loads(line)))
            except (ValueError, KeyError, TypeError) as err:
                raise ValueError(f"{path}:{number}: not a drift report: {err}") from None
    return reports


def alarmed_keys(reports: Iterable[DriftReport]) -> dict[str, str]:
    """Record key -> the alarm of the first report that refused it."""
    refused: dict[str, str] = {}
    for report in reports:
        for version in report.versions:
            if version.alarm:
                for key in version.keys:
                    refused.setdefault(key, f"step {report.step}: {version.alarm}")
    return refused


def trained_versions(traj: Trajectory) -> list[Version | None]:
    """The version of every trained token of a trajectory, in order: each turn's
    sampled tokens carry its turn's version, or its runs' when a sync landed while the
    action was sampled (:mod:`.token_versions`; None where the turn has none). A sync
    that landed mid-episode gives one trajectory tokens of several versions, and
    each token is compared under its own (a whole-row version would leave them out).

    Trained tokens come in turn order, ``len(action)`` per turn, none for a turn
    masked as a parse error (:mod:`agentenvs.rollout.data.samples`), so a training
    sample's trained tokens are a slice of this list, whatever prefix breaks cut it."""
    versions: list[Version | None] = []
    for tr in traj.transitions:
        if float(tr.metrics.get(PARSE_ERROR_MASKED_METRIC, 0.0)) < 1.0:
            versions += token_versions(tr)
    return versions


def rows_from_records(
    records: Iterable[GroupRecord], reference: ReferenceLogprobs
) -> list[DriftRow]:
    """One row per sampled turn of every ok record: the turn's version stamp, the
    sampler's logprobs, and ``reference(observation + action, len(observation))``
    (a :data:`~.probe.ReferenceLogprobs`, e.g. ``torch_reference(model)``): for a
    trainer that does not keep its own per-token logprobs at hand."""
    rows = []
    for record in records:
        if record.group is None:
            continue
        for traj in record.group.trajectories:
            for tr in traj.transitions:
                sampled = tr.ac.logprobs
                if not tr.ac.tokens or sampled is None:
                    continue
                ob = list(tr.ob)
                trainer = reference(ob + list(tr.ac.tokens), len(ob))
                if isinstance(trainer, Awaitable):
                    raise TypeError("rows_from_records needs a synchronous reference")
                trainer = list(trainer)
                # One row per version run: an action a sync cut holds tokens of several.
                start = 0
                for version, n in _version_spans(tr):
                    end = start + n
                    row = DriftRow(
                        version, list(sampled[start:end]), trainer[start:end], record.key
                    )
                    rows.append(row)
                    start = end
    return rows


def _version_spans(tr: Any) -> list[tuple[Version | None, int]]:
    """(version, tokens) of each run of one version in a turn's action, in order."""
    spans: list[tuple[Version | None, int]] = []
    for version in token_versions(tr):
        if spans and spans[-1][0] == version:
            spans[-1] = (version, spans[-1][1] + 1)
        else:
            spans.append((version, 1))
    return spans
