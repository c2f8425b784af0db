"""The comparison as a PNG (``agentenvs compare --png FILE``): rewards per run, paired differences.

Left: each run's trajectory rewards as a histogram over shared bins, so two
distributions can be read against each other. Right: per task, the other run's
mean reward minus the baseline's, sorted, with the mean difference and its
bootstrap interval drawn across: bars on both sides of zero and an interval
covering it is what "no difference shown" looks like. matplotlib draws it (the
``plot`` extra), with its non-interactive backend so no display is needed.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from agentenvs.rollout.compare.report import Comparison


class PlotUnavailableError(ImportError):
    """matplotlib is not installed."""


def reward_bins(rewards: list[list[float]], count: int = 20) -> list[float]:
    """Shared bin edges for every run's rewards (one bin per value when there are few)."""
    values = sorted({r for run in rewards for r in run})
    if not values:
        return [0.0, 1.0]
    if len(values) <= count:
        steps = [b - a for a, b in itertools.pairwise(values)]
        half = (min(steps) if steps else 1.0) / 2
        return [values[0] - half, *[(a + b) / 2 for a, b in itertools.pairwise(values)],
                values[-1] + half]  # fmt: skip
    low, high = values[0], values[-1]
    return [low + (high - low) * i / count for i in range(count + 1)]


def run_rewards(comparison: Comparison) -> list[list[float]]:
    return [[r for t in run.tasks.values() for r in t.rewards] for run in comparison.runs]


def write_png(comparison: Comparison, path: Path) -> Path:
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailableError(
            "--png needs matplotlib: pip install 'agentenvs[plot]' (or use --html)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rewards = run_rewards(comparison)
    shown = comparison.paired
    figure, axes = plt.subplots(1, 1 + len(shown), figsize=(5 + 5 * len(shown), 3.6))
    axes = list(axes) if len(shown) else [axes]
    bins = reward_bins(rewards)
    for run, values in zip(comparison.runs, rewards, strict=True):
        axes[0].hist(values, bins=bins, alpha=0.55, label=run.label)
    axes[0].set_title("reward per trajectory")
    axes[0].set_xlabel("total reward")
    axes[0].set_ylabel("trajectories")
    axes[0].legend(fontsize="small")
    for axis, pair in zip(axes[1:], shown, strict=True):
        order = sorted(pair.differences)
        axis.bar(range(len(order)), order, color=["#2a7" if d > 0 else "#c44" for d in order])
        axis.axhline(0, color="black", linewidth=0.8)
        axis.axhspan(pair.reward.low, pair.reward.high, color="#48c", alpha=0.25)
        axis.axhline(pair.reward.mean, color="#248", linewidth=1.2)
        axis.set_title(
            f"{pair.other} − {pair.baseline} per task\nmean {pair.reward.mean:+.3f} "
            f"[{pair.reward.low:.3f}, {pair.reward.high:.3f}]"
        )
        axis.set_xlabel(f"tasks, sorted ({len(order)} paired)")
        axis.set_ylabel("mean reward difference")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
