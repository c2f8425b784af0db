"""The numbers of a comparison: per-run statistics and the paired difference with its interval.

Runs are paired by task: each task's mean reward in one run against the same task's
in the other, so task difficulty (the largest source of variance on a panel) cancels.
The interval is a percentile bootstrap over tasks: resample the per-task differences
with replacement, take the mean each time, read the interval off the quantiles. It
is seeded, so the same stores give the same interval; the number of resamples is
part of the answer and is printed with it.

Per-run statistics (mean reward, zero-advantage share, turns, tokens, stop reasons)
are the collector's own :func:`~agentenvs.rollout.collect.collector.summarize`, the
numbers ``agentenvs rollout`` prints, so the two commands never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentenvs.rollout.compare.runs import Run

TIE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    level: float
    resamples: int
    seed: int

    @property
    def verdict(self) -> str:
        if self.low > 0:
            return "higher (the interval excludes 0)"
        if self.high < 0:
            return "lower (the interval excludes 0)"
        return "no difference shown (the interval includes 0)"

    def to_json(self) -> dict[str, Any]:
        return {
            "mean_difference": self.mean,
            "ci": [self.low, self.high],
            "level": self.level,
            "resamples": self.resamples,
            "seed": self.seed,
            "verdict": self.verdict,
        }


def bootstrap_mean(
    differences: list[float], *, resamples: int, seed: int, level: float = 0.95
) -> Interval:
    """The mean of ``differences`` and its percentile-bootstrap interval at ``level``."""
    import numpy as np

    if not differences:
        raise ValueError("no paired tasks to compare")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, got {level}")
    values = np.asarray(differences, dtype=float)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 2_000_000 // len(values))  # bounded memory for large panels
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        picks = rng.integers(0, len(values), size=(stop - start, len(values)))
        means[start:stop] = values[picks].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return Interval(float(values.mean()), float(low), float(high), level, resamples, seed)


@dataclass(frozen=True)
class Paired:
    """One run against the baseline, task by task."""

    baseline: str
    other: str
    tasks: list[str]
    """The tasks both runs have outcomes for, sorted."""
    differences: list[float]
    """Per task: the other run's mean reward minus the baseline's."""
    reward: Interval
    success: Interval
    wins: int
    losses: int
    ties: int
    unpaired: int
    """Tasks of either panel that only one run has an outcome for (failed, or not run)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "other": self.other,
            "tasks": len(self.tasks),
            "unpaired_tasks": self.unpaired,
            "reward": self.reward.to_json(),
            "success_rate": self.success.to_json(),
            "wins": self.wins,
            "losses": self.losses,
            "ties": self.ties,
            "per_task": dict(zip(self.tasks, self.differences, strict=True)),
        }


def paired(base: Run, other: Run, *, resamples: int, seed: int, level: float = 0.95) -> Paired:
    tasks = sorted(base.tasks.keys() & other.tasks.keys())
    if not tasks:
        raise ValueError(f"{base.label} and {other.label} have no task with an outcome in both")
    rewards = [other.tasks[t].mean_reward - base.tasks[t].mean_reward for t in tasks]
    successes = [other.tasks[t].success_rate - base.tasks[t].success_rate for t in tasks]
    every = (base.panel | base.tasks.keys()) | (other.panel | other.tasks.keys())
    return Paired(
        baseline=base.label,
        other=other.label,
        tasks=tasks,
        differences=rewards,
        reward=bootstrap_mean(rewards, resamples=resamples, seed=seed, level=level),
        success=bootstrap_mean(successes, resamples=resamples, seed=seed, level=level),
        wins=sum(d > TIE_TOLERANCE for d in rewards),
        losses=sum(d < -TIE_TOLERANCE for d in rewards),
        ties=sum(abs(d) <= TIE_TOLERANCE for d in rewards),
        unpaired=len(every) - len(tasks),
    )


def run_statistics(run: Run) -> dict[str, Any]:
    """What ``agentenvs rollout`` summarises, plus the success rate and tokens per trajectory."""
    from agentenvs.rollout.collect.collector import summarize

    trajectories = sum(len(t.rewards) for t in run.tasks.values())
    successes = sum(sum(t.successes) for t in run.tasks.values())
    if run.kind == "store":
        stats = summarize(run.records)
    else:  # a hand-off: rewards and trained tokens only
        rewards = [r for t in run.tasks.values() for r in t.rewards]
        stats = {
            "groups": len(run.tasks),
            "ok": len(run.tasks),
            "failed": 0,
            "trajectories": len(rewards),
            "mean_reward": sum(rewards) / len(rewards),
            "zero_advantage_share": sum(len(set(t.rewards)) <= 1 for t in run.tasks.values())
            / len(run.tasks),
            "tokens_sampled": run.settings.get("handoff_tokens"),
            "stop_reasons": {},
        }
    tokens = stats.get("tokens_sampled")
    return {
        **stats,
        "tasks": len(run.tasks),
        "success_rate": successes / trajectories if trajectories else None,
        "success_rule": run.success_rule,
        "mean_tokens": tokens / trajectories if trajectories and tokens is not None else None,
    }
