"""The drift alarm on a verl-style batch: the trainer's logprobs against the sampler's.

verl computes ``old_log_probs`` with the actor before the update; the hand-off
(:func:`~agentenvs.rollout.trainers.verl.handoff.to_verl_batch`) carries the
sampler's as ``rollout_log_probs`` with ``response_mask`` and each row's
``group_index``/``traj_index``. :func:`batch_drift` compares the two per weights
version (:mod:`agentenvs.rollout.weights.drift`), so a step can refuse a batch the
sampler did not produce with the weights it claims. A row whose turns came from
several versions (a sync landed mid-episode) has no single version and is left out
(counted in ``skipped``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.weights.drift import DriftReport, DriftRow, measure_drift
from agentenvs.rollout.weights.proof import Tolerance
from agentenvs.rollout.weights.stamps import SampledBy, Version


def batch_drift(
    batch: dict[str, Any],
    trainer_log_probs: Any,
    records: Sequence[GroupRecord],
    *,
    trainer_version: Version | None,
    tolerance: Tolerance | None = None,
    step: int | None = None,
) -> DriftReport:
    """``trainer_log_probs``: ``[rows, response width]``, the trainer's logprob of each
    response token under the weights it holds (verl's ``old_log_probs``), or a mapping
    from version to such a tensor under that version's weights, for a trainer that
    keeps the versions it still trains on (each row is then scored by the weights of
    the version that sampled it; rows of other versions by ``trainer_version``'s).
    ``records`` are the ones whose groups made the batch, in the order given to
    ``trajectories_to_samples`` (records without a group are skipped there too)."""
    groups = [r for r in records if r.group is not None]
    mask = batch["response_mask"].bool()
    sampler = batch["rollout_log_probs"]
    by_version = trainer_log_probs if isinstance(trainer_log_probs, Mapping) else None
    rows = []
    for row in range(mask.shape[0]):
        record = groups[int(batch["group_index"][row])]
        assert record.group is not None
        traj = record.group.trajectories[int(batch["traj_index"][row])]
        versions = SampledBy.of_trajectory(traj).versions
        version = versions[0] if len(versions) == 1 else None
        scored_by = trainer_version
        ours = trainer_log_probs
        if by_version is not None:
            scored_by = version if version in by_version else trainer_version
            ours = by_version[scored_by]
        keep = mask[row]
        rows.append(
            DriftRow(
                version,
                sampler[row][keep].tolist(),
                ours[row][keep].tolist(),
                record.key,
                trainer_version=scored_by,
            )
        )
    return measure_drift(
        rows,
        trainer_version=trainer_version,
        tolerance=tolerance or Tolerance.for_dtype("float32"),
        step=step,
    )
