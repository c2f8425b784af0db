"""A whole comparison: load the runs, check they are comparable, and (if they are) the result.

:func:`compare_runs` is what ``agentenvs compare`` does, callable from Python; it
returns a :class:`Comparison` whose :meth:`~Comparison.to_json` is the ``--json``
output. The result is left out (``paired`` empty) when the comparison is refused:
numbers computed over runs that differ in a setting nobody accepted are the
misleading thing this command exists to prevent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenvs.rollout.compare.comparability import Comparability, check_comparable
from agentenvs.rollout.compare.runs import Run, load_run, run_labels
from agentenvs.rollout.compare.stats import Paired, paired, run_statistics

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0


@dataclass
class Comparison:
    runs: list[Run]
    comparability: Comparability
    statistics: list[dict[str, Any]]
    paired: list[Paired] = field(default_factory=list)
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    level: float = 0.95

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": [
                {
                    "label": run.label,
                    "path": str(run.path),
                    "kind": run.kind,
                    "settings": _plain(run.settings),
                    "panel": sorted(run.panel),
                    "weights": [w.to_json() for w in run.weights],
                    "statistics": stats,
                }
                for run, stats in zip(self.runs, self.statistics, strict=True)
            ],
            "comparability": self.comparability.to_json(),
            "bootstrap": {"resamples": self.resamples, "seed": self.seed, "level": self.level},
            "paired": [p.to_json() for p in self.paired],
        }


def compare_runs(
    paths: Sequence[str | Path],
    *,
    allow: Iterable[str] = (),
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = 0.95,
) -> Comparison:
    """Compare the runs in ``paths`` (the first is the baseline); see the module docstring."""
    from agentenvs.rollout.compare.comparability import parse_allow

    if len(paths) < 2:
        raise ValueError("compare needs at least two runs")
    allowed = parse_allow(allow)
    files = [Path(p) for p in paths]
    runs = [load_run(p, label) for p, label in zip(files, run_labels(files), strict=True)]
    comparability = check_comparable(runs, allowed)
    comparison = Comparison(
        runs,
        comparability,
        [run_statistics(r) for r in runs],
        resamples=resamples,
        seed=seed,
        level=level,
    )
    if not comparability.comparable:
        return comparison
    for other in runs[1:]:
        if runs[0].tasks.keys() & other.tasks.keys():
            comparison.paired.append(
                paired(runs[0], other, resamples=resamples, seed=seed, level=level)
            )
        else:  # another split, say: accepted, but there is nothing to pair
            comparability.notes.append(
                f"{runs[0].label} and {other.label} share no task with an outcome: not paired"
            )
    return comparison


def _plain(settings: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if k != "handoff_tokens"}
