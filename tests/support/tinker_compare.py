"""Comparisons of our Tinker hand-off with the cookbook's own functions."""

from __future__ import annotations

import tinker
from tinker_cookbook.rl import data_processing as cookbook_data

from agentenvs.envs.types import TrajectoryGroup
from agentenvs.rollout.trainers.tinker.cookbook import to_tinker_stop_reason
from agentenvs.rollout.trainers.tinker.handoff import assemble_tinker_data


def assert_same_datums(ours: list[tinker.Datum], theirs: list[tinker.Datum]) -> None:
    assert len(ours) == len(theirs)
    for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        where = f"datum {index}"
        assert type(a) is type(b)
        assert a.model_input == b.model_input, where
        assert [type(c) for c in a.model_input.chunks] == [type(c) for c in b.model_input.chunks]
        assert a.model_input.to_ints() == b.model_input.to_ints(), where
        assert list(a.loss_fn_inputs) == list(b.loss_fn_inputs), where
        for key, mine in a.loss_fn_inputs.items():
            other = b.loss_fn_inputs[key]
            assert isinstance(mine, tinker.TensorData)
            assert mine.dtype == other.dtype, (where, key)
            assert mine.shape == other.shape, (where, key)
            x, y = mine.to_numpy(), other.to_numpy()
            assert x.dtype == y.dtype and x.shape == y.shape, (where, key)
            assert x.tobytes() == y.tobytes(), (where, key)  # bit for bit
            assert mine.to_torch().dtype == other.to_torch().dtype, (where, key)
        assert a.model_input_spans == b.model_input_spans
        assert a.loss_fn_input_spans == b.loss_fn_input_spans


def untimed(metrics: dict) -> dict:
    """Metrics without wall-clock timings, which differ between two runs."""
    return {k: v for k, v in metrics.items() if "seconds" not in k and "time" not in k}


def assert_same_trajectories(
    theirs: TrajectoryGroup, ours: TrajectoryGroup, *, logprob_tolerance: float = 0.0
) -> None:
    """Equal episodes. ``logprob_tolerance`` > 0 only for two samplings by a real server
    (not one episode converted twice): vLLM on the CPU is not batch-invariant, so the
    same tokens get logprobs a few 1e-6 apart when the requests batch differently."""
    assert theirs.group_rewards == ours.group_rewards
    assert len(theirs.trajectories) == len(ours.trajectories)
    for a, b in zip(theirs.trajectories, ours.trajectories, strict=True):
        assert a.stop_reason == b.stop_reason
        assert a.final_ob == b.final_ob
        assert len(a.transitions) == len(b.transitions)
        for x, y in zip(a.transitions, b.transitions, strict=True):
            assert x.ob == y.ob
            assert x.ac.tokens == y.ac.tokens
            if logprob_tolerance:
                assert x.ac.logprobs is not None and y.ac.logprobs is not None
                assert len(x.ac.logprobs) == len(y.ac.logprobs)
                gaps = [abs(a - b) for a, b in zip(x.ac.logprobs, y.ac.logprobs, strict=True)]
                assert max(gaps, default=0.0) <= logprob_tolerance, gaps
            elif y.ac.logprobs is None and x.ac.logprobs is not None:
                # Our policy had none (scripted); the cookbook requires them, so its
                # completer carried 0.0 per token (and warned).
                assert x.ac.logprobs == [0.0] * len(x.ac.tokens)
            else:
                assert x.ac.logprobs == y.ac.logprobs
            assert x.ac.stop_reason == to_tinker_stop_reason(y.ac.stop_reason)
            assert (x.reward, x.episode_done) == (y.reward, y.episode_done)
            assert untimed(x.metrics) == untimed(y.metrics)


def assert_cookbook_datums_equal_ours(theirs_group, ours_group: TrajectoryGroup) -> None:
    """The cookbook's ``assemble_training_data`` over its group equals our Tinker
    hand-off over ours, fed the cookbook's float32 advantages."""
    advantages = cookbook_data.compute_advantages([theirs_group])
    theirs, theirs_meta = cookbook_data.assemble_training_data([theirs_group], advantages)
    ours, ours_meta = assemble_tinker_data([ours_group], [a.tolist() for a in advantages])
    # the cookbook's keys, equal; ours adds the per-target weights versions (partial rollouts)
    assert [{k: m[k] for k in theirs_m} for m, theirs_m in zip(ours_meta, theirs_meta, strict=True)] == theirs_meta  # fmt: skip
    for m, datum in zip(ours_meta, ours, strict=True):
        versions = m.get("token_versions")
        assert versions is None or len(versions) == datum.model_input.length
    assert_same_datums(ours, theirs)
