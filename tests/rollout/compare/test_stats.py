"""The paired bootstrap: seeded, centred on the mean difference, as wide as the data says."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agentenvs.rollout.compare.runs import Run, TaskOutcome
from agentenvs.rollout.compare.stats import bootstrap_mean, paired


def test_the_interval_is_seeded_and_reported_with_its_resamples() -> None:
    rng = random.Random(3)
    values = [rng.gauss(0.1, 1.0) for _ in range(40)]
    first = bootstrap_mean(values, resamples=500, seed=7)
    assert first == bootstrap_mean(values, resamples=500, seed=7)
    assert first != bootstrap_mean(values, resamples=500, seed=8)
    assert (first.resamples, first.seed, first.level) == (500, 7, 0.95)
    assert first.low < first.mean < first.high
    assert first.mean == pytest.approx(sum(values) / len(values))


def test_the_interval_narrows_with_more_tasks_and_covers_the_truth() -> None:
    rng = random.Random(0)
    covered = 0
    widths = []
    for trial in range(40):
        values = [rng.gauss(0.5, 1.0) for _ in range(60)]
        interval = bootstrap_mean(values, resamples=400, seed=trial)
        covered += interval.low <= 0.5 <= interval.high
        widths.append(interval.high - interval.low)
    assert covered >= 34  # about 95% of 40; a biased or too-narrow interval misses more
    wide = bootstrap_mean([rng.gauss(0.5, 1.0) for _ in range(15)], resamples=400, seed=0)
    assert wide.high - wide.low > sum(widths) / len(widths)
    # the textbook width for 60 draws of sd 1: 2 * 1.96 / sqrt(60) = 0.51
    assert 0.4 < sum(widths) / len(widths) < 0.62


@pytest.mark.parametrize("bad", [{"resamples": 0}, {"level": 1.0}, {"level": 0.0}])
def test_bad_bootstrap_settings_are_refused(bad) -> None:
    options = {"resamples": 10, "seed": 0, **bad}
    with pytest.raises(ValueError):
        bootstrap_mean([1.0, 2.0], **options)


def run(label: str, rewards: dict[str, list[float]]) -> Run:
    tasks = {t: TaskOutcome(t, list(r), [x > 0 for x in r]) for t, r in rewards.items()}
    return Run(Path(label), label, "store", [], tasks, frozenset(tasks), {}, [], "reward > 0")


def test_pairing_is_by_task_not_by_position() -> None:
    base = run("a", {"t1": [0.0, 0.0], "t2": [1.0, 1.0], "t3": [0.5, 0.5], "t4": [1.0, 0.0]})
    other = run("b", {"t4": [0.0, 0.0], "t3": [1.0, 1.0], "t2": [1.0, 1.0], "t1": [0.5, 0.5]})
    pair = paired(base, other, resamples=200, seed=0)
    assert pair.tasks == ["t1", "t2", "t3", "t4"]
    assert pair.differences == [0.5, 0.0, 0.5, -0.5]  # by position it would be [0, 0, 0.5, 0]
    assert (pair.wins, pair.losses, pair.ties) == (2, 1, 1)
    assert pair.reward.mean == pytest.approx(0.125)
    assert pair.success.mean == pytest.approx((1.0 + 0.0 + 0.0 - 0.5) / 4)


def test_tasks_only_one_run_has_are_counted_unpaired() -> None:
    base = run("a", {"t1": [1.0], "t2": [0.0]})
    other = run("b", {"t1": [1.0], "t3": [1.0]})
    pair = paired(base, other, resamples=50, seed=0)
    assert pair.tasks == ["t1"] and pair.unpaired == 2
