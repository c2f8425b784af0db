"""A preset's batch in rows, as the original trains it and as each trainer would.

Three trainers count a batch three ways. verl 0.9.1 counts ``data.train_batch_size``
and ``ppo_mini_batch_size`` in prompts and multiplies both by ``rollout.n``
(``verl/trainer/ppo/ray_trainer.py:1353``); TRL counts completions
(``generation_batch_size``, and ``per_device_train_batch_size x processes x
gradient_accumulation_steps`` per optimiser step); the Tinker cookbook splits a batch of
``batch_size`` groups into ``num_substeps`` near-equal parts
(``tinker_cookbook/rl/train.py:330``). The originals count rows: Search-R1 and
verl-agent keep ``rollout.n=1`` and repeat the batch themselves, so their
``ppo_mini_batch_size`` *is* rows.

So the emitted numbers are derived from two figures that mean the same in every trainer,
rows per optimiser step and optimiser steps per batch (:class:`BatchFigures`), never
copied from the script. Where a trainer cannot reach the original's figures (whole
numbers do not allow it, or the trainer trains another kind of row) :class:`BatchPlan`
says so, with both sets of figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentenvs.rollout.presets.originals import TrainerHalf

BATCH_KNOBS = frozenset(
    {"prompts_per_step", "group_size", "row_unit", "rows_per_optimiser_step", "ppo_epochs"}
)
"""The knobs a :class:`BatchPlan` turns into each trainer's batch settings."""


@dataclass(frozen=True)
class BatchFigures:
    """One training batch, in rows.

    ``rows_per_batch`` is None when it depends on the episodes (one row per step taken);
    ``rows_per_optimiser_step`` is None when a step takes a fixed share of the batch
    rather than a fixed number of rows; ``optimiser_steps_per_batch`` is None when it
    grows with the batch (``ceil(rows / rows_per_optimiser_step)``)."""

    row: str
    rows_per_batch: int | None
    rows_per_optimiser_step: int | None
    optimiser_steps_per_batch: int | None

    def describe(self) -> str:
        rows = f"{self.row} rows"
        steps = self.optimiser_steps_per_batch
        if self.rows_per_optimiser_step is None:
            share = "all its" if steps == 1 else f"a 1/{steps} share of its"
            plural = "" if steps == 1 else "s"
            return (
                f"{steps} optimiser step{plural} per batch, each over {share} {rows} (as many "
                "as the episodes took steps)"
            )
        per_step = f"{self.rows_per_optimiser_step:,} {rows} per optimiser step"
        if steps is None:
            return (
                f"{per_step}, ceil(rows / {self.rows_per_optimiser_step}) optimiser steps per "
                "batch (as many rows as the episodes took steps)"
            )
        plural = "" if steps == 1 else "s"
        return f"{per_step}, {steps} optimiser step{plural} per {self.rows_per_batch:,}-row batch"

    def to_json(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "rows_per_batch": self.rows_per_batch,
            "rows_per_optimiser_step": self.rows_per_optimiser_step,
            "optimiser_steps_per_batch": self.optimiser_steps_per_batch,
        }


@dataclass
class BatchPlan:
    """A trainer's batch settings for a preset, the figures they give, and, when those are
    not the original's, why (``differs``, naming both)."""

    settings: dict[str, Any]
    figures: BatchFigures
    differs: str = ""
    requires: dict[str, int] = field(default_factory=dict)
    """Products the trainer's per-machine settings must come to (TRL)."""


def original_figures(half: TrainerHalf) -> BatchFigures:
    """The original's batch, from its cited knobs."""
    row = half.value("row_unit")
    per_step = half.value("rows_per_optimiser_step")
    epochs = half.value("ppo_epochs", 1)
    if row == "step":  # one row per step taken: the batch's size is the episodes'
        return BatchFigures(row, None, per_step, None)
    rows = half.value("prompts_per_step") * half.value("group_size")
    return BatchFigures(row, rows, per_step, rows // per_step * epochs)


def _trajectory_rows_only(trainer: str, half: TrainerHalf, rows: int) -> str:
    per_step = half.value("rows_per_optimiser_step")
    return (
        f"{trainer} trains one row per episode (agentenvs hands over each episode's last "
        f"windowed step), {half.original.repo} one row per step: {per_step} step rows per "
        f"optimiser step, ceil(step rows / {per_step}) steps per batch. So the {rows} episode "
        "rows of a batch make one optimiser step here. For the original's rows collect with "
        "agentenvs (every windowed step is a sample, GiGPO advantages included) and train on "
        "those samples"
    )


def verl_batch(half: TrainerHalf) -> BatchPlan:
    """``data.train_batch_size``, ``rollout.n`` and ``ppo_mini_batch_size`` (prompts)."""
    prompts, group = half.value("prompts_per_step"), half.value("group_size")
    epochs = half.value("ppo_epochs", 1)
    want = original_figures(half)
    settings: dict[str, Any] = {
        "data.train_batch_size": prompts,
        "actor_rollout_ref.rollout.n": group,
    }
    differs = ""
    if want.row == "step":
        mini = prompts
        differs = _trajectory_rows_only("verl 0.9.1's agent loop", half, prompts * group)
    else:
        per_step = want.rows_per_optimiser_step
        assert per_step is not None
        exact = per_step % group == 0 and prompts % (per_step // group) == 0
        if exact:
            mini = per_step // group
        else:  # whole prompts cannot make the rows: the divisor of the batch nearest in rows
            divisors = [d for d in range(1, prompts + 1) if prompts % d == 0]
            mini = min(divisors, key=lambda d: (abs(d * group - per_step), d))
            differs = (
                f"verl counts ppo_mini_batch_size in prompts and multiplies it by rollout.n="
                f"{group}, so {per_step} rows per optimiser step would be "
                f"{per_step / group:g} prompts; the nearest whole divisor of {prompts} is "
                f"{mini} prompts: {mini * group} rows per step, {prompts // mini} steps per "
                f"batch ({half.original.repo}: {want.describe()})"
            )
    settings["actor_rollout_ref.actor.ppo_mini_batch_size"] = mini
    settings["actor_rollout_ref.actor.ppo_epochs"] = epochs
    figures = BatchFigures("trajectory", prompts * group, mini * group, prompts // mini * epochs)
    return BatchPlan(settings, figures, differs)


def trl_batch(half: TrainerHalf) -> BatchPlan:
    """``num_generations`` and ``generation_batch_size`` (completions); the completions
    per optimiser step come from per-machine settings, so they are a requirement."""
    prompts, group = half.value("prompts_per_step"), half.value("group_size")
    epochs = half.value("ppo_epochs", 1)
    want = original_figures(half)
    rows = prompts * group
    settings: dict[str, Any] = {
        "num_generations": group,
        "generation_batch_size": rows,
        "num_iterations": epochs,
    }
    product = "per_device_train_batch_size x processes x gradient_accumulation_steps"
    if want.row == "step":
        differs = _trajectory_rows_only("TRL", half, rows)
        return BatchPlan(settings, BatchFigures("trajectory", rows, rows, epochs), differs,
                         {product: rows})  # fmt: skip
    per_step = want.rows_per_optimiser_step
    assert per_step is not None and rows % per_step == 0
    figures = BatchFigures("trajectory", rows, per_step, rows // per_step * epochs)
    return BatchPlan(settings, figures, "", {product: per_step})


def cookbook_batch(half: TrainerHalf) -> BatchPlan:
    """``dataset_builder.batch_size`` (groups), ``group_size`` and ``num_substeps``."""
    prompts, group = half.value("prompts_per_step"), half.value("group_size")
    want = original_figures(half)
    settings: dict[str, Any] = {
        "dataset_builder.batch_size": prompts,
        "dataset_builder.group_size": group,
    }
    if want.row == "step":  # every windowed step is its own datum here too, but...
        per_step = want.rows_per_optimiser_step
        differs = (
            "the cookbook splits each batch into num_substeps near-equal parts "
            "(tinker_cookbook/rl/train.py:330), a number fixed before the episodes run; "
            f"{half.original.repo} takes {per_step} step rows per optimiser step, so its step "
            f"count grows with the batch (ceil(step rows / {per_step})). num_substeps is left "
            "at 1: set it to the step rows you expect divided by "
            f"{per_step}"
        )
        return BatchPlan(settings, BatchFigures("step", None, None, 1), differs)
    if half.value("ppo_epochs", 1) != 1:
        raise ValueError("the cookbook makes one pass over each batch")
    per_step = want.rows_per_optimiser_step
    rows = prompts * group
    assert per_step is not None and rows % per_step == 0
    settings["num_substeps"] = rows // per_step
    return BatchPlan(settings, BatchFigures("trajectory", rows, per_step, rows // per_step))
