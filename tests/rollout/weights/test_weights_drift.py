"""The drift alarm's rule, its log and its readers, at the measured magnitudes.

Engine noise is the measured fp32 one (:data:`NOISE`); the drift of a stale sync is
the size one AdamW step moves the sampled tokens (LoRA lr 1e-6: ~3e-4 RMS on the
suite's model). The real-engine test is ``test_vllm_drift.py``.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from agentenvs.envs.registry import make
from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.data.training_data import samples_from_records
from agentenvs.rollout.inspect.check import check_records
from agentenvs.rollout.weights.drift import (
    DriftAlarm,
    DriftLog,
    DriftReport,
    DriftRow,
    alarmed_keys,
    measure_drift,
    trained_versions,
)
from agentenvs.rollout.weights.proof import NOISE, Tolerance

FP32 = Tolerance.for_dtype("float32")


def _row(version, size: float, seed: int, n: int = 40, key: str | None = None, **more) -> DriftRow:
    """``n`` sampled tokens whose trainer logprobs differ by Gaussian noise of ``size``."""
    rng = random.Random(seed)
    sampler = [-rng.uniform(0.0, 8.0) for _ in range(n)]
    return DriftRow(version, sampler, [s + rng.gauss(0.0, size) for s in sampler], key, **more)


def test_clean_batches_never_alarm_and_a_stale_one_always_does():
    noise = NOISE["float32"].rms
    false_alarms = sum(
        measure_drift(
            [_row(3, noise, seed + i) for i in range(8)], trainer_version=3, tolerance=FP32
        ).alarm
        is not None
        for seed in range(0, 2000, 8)
    )
    assert false_alarms == 0
    for seed in range(50):
        stale = measure_drift([_row(3, 3e-4, seed)], trainer_version=3, tolerance=FP32)
        assert stale.alarm is not None and "version 3" in stale.alarm


def test_only_tokens_of_the_trainers_version_can_alarm():
    rows = [_row(1, 0.5, 1, key="old"), _row(2, NOISE["float32"].rms, 2, key="new")]
    report = measure_drift(rows, trainer_version=2, tolerance=FP32)
    old, new = report.versions
    assert (old.version, old.on_policy, old.alarm) == (1, False, None)  # allowed staleness
    assert old.rms > 0.1 and new.on_policy and new.alarm is None
    assert report.alarm is None and report.alarmed_keys == frozenset()


def test_unscored_tokens_and_unversioned_rows_are_counted_not_compared():
    rows = [
        DriftRow(2, [-1.0, float("nan"), -2.0], [-1.0, -9.0, -2.0]),
        DriftRow(None, [-1.0], [-5.0]),
    ]
    report = measure_drift(rows, trainer_version=2, tolerance=FP32)
    assert report.skipped == 2 and report.versions[0].tokens == 2 and report.alarm is None
    with pytest.raises(ValueError, match="in one row"):
        measure_drift([DriftRow(2, [-1.0], [])], trainer_version=2, tolerance=FP32)


def _records(tokenizer, keys: list[str]):
    async def policy(ob, stop, *, max_tokens=None):
        tokens = tokenizer.encode("guess 7", add_special_tokens=False)
        return TokensWithLogprobs(tokens, [-0.5] * len(tokens), "stop")

    config = make("guess_number", tasks=len(keys))
    builders = [config.group_builder(i, 2, tokenizer) for i in range(len(keys))]
    result = asyncio.run(collect(builders, policy, CollectOptions(progress=False), keys=keys))
    assert [r.key for r in result.ok] == keys
    return result.ok


def test_the_log_round_trips_and_its_readers_refuse_alarmed_groups(tmp_path, tokenizer):
    log = DriftLog(tmp_path / "drift.jsonl")
    clean = measure_drift([_row(1, 1e-6, 1, key="a")], trainer_version=1, tolerance=FP32, step=0)
    stale = measure_drift([_row(2, 3e-4, 2, key="b")], trainer_version=2, tolerance=FP32, step=1)
    log.append(clean)
    log.append(stale)
    read = log.read()
    assert read == [clean, stale] and isinstance(read[1], DriftReport)
    assert alarmed_keys(read) == {"b": f"step 1: {stale.alarm}"}

    records = _records(tokenizer, ["a", "b"])
    with pytest.raises(DriftAlarm, match="group b"):
        samples_from_records(records, drift=read)
    assert samples_from_records(records[:1], drift=read)[0]
    report = check_records(records, drift=read)
    failing = [f for f in report.findings if f.status == "fail"]
    assert not report.ok and any("did not run the weights" in f.detail for f in failing)
    assert check_records(records[:1], drift=read[:1]).ok

    (tmp_path / "torn.jsonl").write_text('{"step": 0}\n')
    with pytest.raises(ValueError, match=r"torn\.jsonl:1: not a drift report"):
        DriftLog(tmp_path / "torn.jsonl").read()


def test_a_trainer_that_kept_the_previous_weights_checks_a_batch_one_version_behind():
    """An async loop trains on groups one version behind: scored with the kept weights
    of their own version they are compared, and a stale sync under them alarms."""
    noise = NOISE["float32"].rms
    kept = _row(1, noise, 1, key="behind", trainer_version=1)
    current = _row(2, noise, 2, key="now")  # scored by the report's version
    clean = measure_drift([kept, current], trainer_version=2, tolerance=FP32)
    assert clean.alarm is None and [(v.version, v.on_policy) for v in clean.versions] == [
        (1, True),
        (2, True),
    ]
    wrong = _row(1, 3e-4, 3, key="behind", trainer_version=1)
    alarmed = measure_drift([wrong, current], trainer_version=2, tolerance=FP32)
    assert alarmed.alarmed_keys == {"behind"}
    # Scored by the current weights instead: not comparable, reported, never an alarm.
    unkept = _row(1, 0.3, 4, key="behind")
    report = measure_drift([unkept, current], trainer_version=2, tolerance=FP32)
    assert report.alarm is None and report.versions[0].on_policy is False


def test_a_verl_row_is_compared_token_by_token_under_each_turns_version():
    """A sync landed mid-episode and the trajectory broke its prefix once (two training
    samples, two batch rows): each trained token keeps its own turn's version, a
    turn masked as a parse error trains nothing, and only version 2's tokens alarm."""
    import torch

    from agentenvs.envs.types import Trajectory, TrajectoryGroup, Transition
    from agentenvs.rollout.collect.records import GroupRecord
    from agentenvs.rollout.data.samples import trajectories_to_samples
    from agentenvs.rollout.trainers.verl.drift import batch_drift
    from agentenvs.rollout.trainers.verl.handoff import to_verl_batch

    def turn(ob, ac, version, masked=False):
        action = TokensWithLogprobs(ac, [-0.5] * len(ac), "stop")
        metrics = {"parse_error_masked": 1.0} if masked else {}
        return Transition(ob, action, 0.0, False, metrics, {"policy/weights_version": version})

    traj = Trajectory(
        [
            turn([1, 2], [3, 4], 1),
            turn([1, 2, 3, 4, 5], [6], 2),
            turn([1, 2, 3, 4, 5, 6, 5], [7], 2, masked=True),
            turn([9, 9], [7, 8], 2),  # not an extension: a new sample
        ]
    )
    assert trained_versions(traj) == [1, 1, 2, 2, 2]
    group = TrajectoryGroup([traj], [0.0], [{}])
    batch = to_verl_batch(trajectories_to_samples([group], [[0.0]]), 0)
    assert batch["response_mask"].shape[0] == 2
    record = GroupRecord("g", "test", "t", group)
    sampler = batch["rollout_log_probs"]
    stale = sampler.clone()  # version 2's weights disagree on every token
    stale[batch["response_mask"].bool()] += 1e-3
    report = batch_drift(batch, {1: sampler.clone(), 2: stale}, [record], trainer_version=2)
    by_version = {v.version: v for v in report.versions}
    assert report.skipped == 0 and by_version[1].tokens == 2 and by_version[2].tokens == 3
    assert by_version[1].alarm is None and by_version[2].alarm
    # Rows handed over out of order map the same way.
    swapped = {k: v.flip(0) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    again = batch_drift(
        swapped, {1: sampler.flip(0), 2: stale.flip(0)}, [record], trainer_version=2
    )
    assert [(v.version, v.tokens, bool(v.alarm)) for v in again.versions] == [
        (1, 2, False),
        (2, 3, True),
    ]
