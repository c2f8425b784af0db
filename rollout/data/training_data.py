"""From stored groups to training samples, with each sample saying where it came from.

The store keeps every group with its provenance and its advantages. A trainer
reading it wants samples plus, per sample, the answers to "which weights made
this?" and "how were its loss inputs computed?". This module gives both, and
drops groups sampled by weights too old to train on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.rollout.collect.fingerprints import attach_collected
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.data.advantages import (
    STEP_ESTIMATORS,
    Estimator,
    StepEstimator,
    estimator_info,
    group_advantages,
)
from agentenvs.rollout.data.gigpo import GigpoSettings, gigpo_advantages
from agentenvs.rollout.data.samples import (
    TrainingSample,
    trajectory_to_samples,
    trajectory_to_step_samples,
)
from agentenvs.rollout.weights.drift import DriftAlarm, DriftReport, alarmed_keys


class StaleSamplesError(AgentEnvsError, ValueError):
    """Samples came from weights older than the trainer accepts."""


def weights_version(record: GroupRecord) -> Any:
    """The version staleness is judged by (:meth:`GroupRecord.sampled_by`)."""
    return record.sampled_by().version


@dataclass
class Freshness:
    kept: list[GroupRecord] = field(default_factory=list)
    stale: list[GroupRecord] = field(default_factory=list)
    unversioned: list[GroupRecord] = field(default_factory=list)


def split_by_staleness(
    records: Sequence[GroupRecord], current_version: int, max_staleness: int
) -> Freshness:
    """Groups at most ``max_staleness`` versions behind ``current_version`` are kept.

    Groups with no recorded version cannot be judged; they are set apart so the
    caller decides (a strict trainer refuses them).
    """
    result = Freshness()
    for record in records:
        version = weights_version(record)
        if version is None:
            result.unversioned.append(record)
        elif int(current_version) - int(version) <= max_staleness:
            result.kept.append(record)
        else:
            result.stale.append(record)
    return result


def samples_from_records(
    records: Sequence[GroupRecord],
    *,
    estimator: Estimator | StepEstimator | None = None,
    normalize_std: bool | None = None,
    gigpo: GigpoSettings | None = None,
    current_version: int | None = None,
    max_staleness: int | None = None,
    drift: Sequence[DriftReport] | None = None,
) -> tuple[list[TrainingSample], list[dict[str, Any]]]:
    """Samples of the ok groups, and one metadata dict per sample.

    Advantages are the ones stored with each group, unless ``estimator`` asks for
    a recomputation (``"gigpo"`` gives each step its own, with ``gigpo``'s settings). With ``max_staleness`` set, any group further behind than
    that raises :class:`StaleSamplesError` naming it, rather than being trained on.
    With ``drift`` (the trainer's drift reports), a group of a batch whose
    on-policy tokens disagreed with the trainer raises :class:`DriftAlarm`.
    """
    ok = [r for r in records if r.status == "ok" and r.group is not None]
    if drift is not None:
        refused = alarmed_keys(drift)
        bad = next((r for r in ok if r.key in refused), None)
        if bad is not None:
            raise DriftAlarm(f"group {bad.key}: {refused[bad.key]}")
    if max_staleness is not None:
        if current_version is None:
            raise ValueError("max_staleness needs current_version")
        fresh = split_by_staleness(ok, current_version, max_staleness)
        if fresh.stale or fresh.unversioned:
            bad = (fresh.stale + fresh.unversioned)[0]
            raise StaleSamplesError(
                f"group {bad.key} was sampled by weights version {weights_version(bad)!r}; "
                f"current is {current_version}, at most {max_staleness} behind is accepted"
            )
    samples: list[TrainingSample] = []
    metadata: list[dict[str, Any]] = []
    for group_index, record in enumerate(ok):
        group = record.group
        assert group is not None
        rewards = group.total_rewards()
        per_step: list[list[float]] | None = None
        if estimator in STEP_ESTIMATORS:
            settings = (gigpo or GigpoSettings()).with_overrides(normalize_std=normalize_std)
            per_step = gigpo_advantages(group, settings)
            advantages = [0.0] * len(group.trajectories)
            how = settings.info()
        elif estimator is not None:
            advantages = group_advantages(rewards, estimator, normalize_std=normalize_std)  # type: ignore[arg-type]
            how = estimator_info(estimator, normalize_std=normalize_std)  # type: ignore[arg-type]
        elif record.extra.get("advantages") is not None:
            advantages = [float(a) for a in record.extra["advantages"]]
            how = record.extra.get("advantage_estimator")
        else:
            raise ValueError(
                f"group {record.key} has no stored advantages; pass estimator= to compute them"
            )
        for traj_index, traj in enumerate(group.trajectories):
            where = {"group_index": group_index, "traj_index": traj_index}
            made = (
                trajectory_to_samples(
                    traj, advantages[traj_index], **where, reward=rewards[traj_index]
                )
                if per_step is None
                else trajectory_to_step_samples(
                    traj, per_step[traj_index], **where, reward=rewards[traj_index]
                )
            )
            attach_collected(made, record, traj_index, rewards[traj_index])
            for sample in made:
                samples.append(sample)
                metadata.append(
                    {
                        "key": record.key,
                        "env": record.env,
                        "task_id": record.task_id,
                        "weights_version": weights_version(record),
                        "advantage_estimator": how,
                        "stop_reason": traj.stop_reason,
                        "provenance": record.provenance,
                    }
                )
    return samples, metadata
