"""The drift alarm on a verl-style batch: the trainer's logprobs against the sampler's.

verl computes ``old_log_probs`` with the actor before the update; the hand-off
(:func:`~agentenvs.rollout.trainers.verl.handoff.to_verl_batch`) carries the
sampler's as ``rollout_log_probs`` with ``response_mask`` and each row's
``group_index``/``traj_index``/``sample_index``. :func:`batch_drift` compares the
two per weights version (:mod:`agentenvs.rollout.weights.drift`), so a step can
refuse a batch the sampler did not produce with the weights it claims. Every
trained token is compared under the version its own turn was stamped with: a row
whose turns came from several versions (a sync landed mid-episode) is split into
its turns' runs, not left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.weights.drift import DriftReport, DriftRow, measure_drift, trained_versions
from agentenvs.rollout.weights.proof import Tolerance
from agentenvs.rollout.weights.stamps import Version


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
    keeps the versions it still trains on (each token is then scored by the weights
    of the version that sampled it; tokens of other versions by ``trainer_version``'s).
    ``records`` are the ones whose groups made the batch, in the order given to
    ``trajectories_to_samples`` (records without a group are skipped there too)."""
    groups = [r for r in records if r.group is not None]
    mask = batch["response_mask"].bool()
    sampler = batch["rollout_log_probs"]
    by_version = trainer_log_probs if isinstance(trainer_log_probs, Mapping) else None
    starts = _trained_starts(batch, mask)
    versions_of: dict[tuple[int, int], list[Version | None]] = {}
    rows = []
    for row in range(mask.shape[0]):
        where = (int(batch["group_index"][row]), int(batch["traj_index"][row]))
        record = groups[where[0]]
        assert record.group is not None
        if where not in versions_of:
            versions_of[where] = trained_versions(record.group.trajectories[where[1]])
        keep = mask[row]
        theirs = sampler[row][keep].tolist()
        start = starts[row]
        versions = versions_of[where][start : start + len(theirs)]
        if len(versions) != len(theirs):  # the trajectory's earlier samples are not here
            versions = [None] * len(theirs)
        scored: dict[Version | None, list[float]] = {}
        for version, first, end in _runs(versions):
            scored_by = trainer_version
            ours = trainer_log_probs
            if by_version is not None:
                scored_by = version if version in by_version else trainer_version
                ours = by_version[scored_by]
            if scored_by not in scored:
                scored[scored_by] = ours[row][keep].tolist()
            rows.append(
                DriftRow(
                    version,
                    theirs[first:end],
                    scored[scored_by][first:end],
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


def _trained_starts(batch: dict[str, Any], mask: Any) -> list[int]:
    """Where each row's trained tokens start among its trajectory's: the trained tokens
    of the trajectory's earlier samples (``sample_index``) come first."""
    counts = mask.sum(dim=1).tolist()
    rows = range(len(counts))
    key = [
        (int(batch["group_index"][r]), int(batch["traj_index"][r]), int(batch["sample_index"][r]))
        for r in rows
    ]
    starts = [0] * len(counts)
    done: dict[tuple[int, int], int] = {}
    for r in sorted(rows, key=key.__getitem__):
        trajectory = key[r][:2]
        starts[r] = done.get(trajectory, 0)
        done[trajectory] = starts[r] + int(counts[r])
    return starts


def _runs(versions: list[Version | None]) -> list[tuple[Version | None, int, int]]:
    """Maximal runs of one version: ``(version, start, end)``."""
    runs: list[tuple[Version | None, int, int]] = []
    for index, version in enumerate(versions):
        if runs and runs[-1][0] == version:
            runs[-1] = (version, runs[-1][1], index + 1)
        else:
            runs.append((version, index, index + 1))
    return runs
