"""The PyTRIO hand-off builds real ``pytrio`` datums that PyTRIO's own batch planner
(the validation ``TrainingClient.forward_backward`` runs before sending) accepts.

No PyTRIO server runs here (it is a paid remote service), so the tests stop at the
client-side planning and payload encoding, which are pure functions of the datums.
"""

from __future__ import annotations

import pytest
import pytrio
from hypothesis import given, settings
from pytrio.client.builders.training import build_trainer_forward_payload
from pytrio.client.training_batch import plan_training_batch
from pytrio.model.limits import TrainingLimits
from support.sample_strategies import batches

from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.data.advantages import compute_advantages
from agentenvs.rollout.data.samples import trajectories_to_samples
from agentenvs.rollout.trainers.pytrio.handoff import IGNORE_INDEX, to_pytrio_datums

NO_LIMITS = TrainingLimits(max_batch_size=None, max_tokens_per_request=None, max_seq_len=None)


def plan(datums, loss_fn="importance_sampling"):
    return plan_training_batch(
        datums, loss_fn=loss_fn, auto_shift=False, limits=NO_LIMITS, tokenizer_vocab_size=60_000
    )


def test_a_multi_turn_sample_becomes_a_pytrio_datum():
    traj = Trajectory(
        [
            Transition([10, 11], TokensWithLogprobs([12, 13], [-0.5, -1.5]), 0.0, False),
            Transition([10, 11, 12, 13, 20, 21], TokensWithLogprobs([14], [-0.25]), 1.0, True),
        ]
    )
    group = TrajectoryGroup(
        [traj, Trajectory([Transition([10], TokensWithLogprobs([9], [-2.0]), 0.0, True)])],
        [0.0, 0.0],
        [{}, {}],
    )
    samples = trajectories_to_samples([group], [[0.5, -0.5]])
    (datum, _) = to_pytrio_datums(samples)
    assert isinstance(datum, pytrio.Datum)
    assert isinstance(datum.model_input, pytrio.ModelInput)
    assert datum.model_input.to_ints() == [10, 11, 12, 13, 20, 21]
    inputs = datum.loss_fn_inputs
    assert inputs["target_tokens"].data == [11, 12, 13, 20, 21, 14]
    assert inputs["target_tokens"].dtype == "int64" and inputs["target_tokens"].shape == [6]
    assert inputs["logprobs"].data == [0.0, -0.5, -1.5, 0.0, 0.0, -0.25]
    assert inputs["advantages"].data == [0.0, 0.5, 0.5, 0.0, 0.0, 0.5]
    assert inputs["advantages"].dtype == "float32"
    assert set(inputs) == {"target_tokens", "logprobs", "advantages"}

    (masked, _) = to_pytrio_datums(samples, ignore_masked_targets=True)
    assert masked.loss_fn_inputs["target_tokens"].data == [
        IGNORE_INDEX,
        12,
        13,
        IGNORE_INDEX,
        IGNORE_INDEX,
        14,
    ]


@settings(max_examples=60, deadline=None)
@given(batches())
def test_pytrio_planner_accepts_our_datums(batch):
    groups, _ = batch
    samples = [
        s
        for s in trajectories_to_samples(groups, compute_advantages(groups, "rloo"))
        if len(s.tokens) > 1
    ]
    if not samples:
        return
    for loss_fn in ("importance_sampling", "ppo"):
        datums = to_pytrio_datums(samples)
        result = plan(datums, loss_fn)
        assert result.totals.total_samples == len(samples)
        # Every target counts as active unless ignored ...
        assert result.totals.total_active_tokens == sum(len(s.tokens) - 1 for s in samples)
        assert result.totals.total_advantage_tokens == sum(
            1 for s in samples for a in s.advantages[1:] if a != 0.0
        )
        # ... and with ignored targets only the trained tokens do.
        masked = plan(to_pytrio_datums(samples, ignore_masked_targets=True), loss_fn)
        assert masked.totals.total_active_tokens == sum(sum(s.loss_mask[1:]) for s in samples)

        payload = build_trainer_forward_payload(
            chunk=result.chunks[0],
            loss_fn_config=None,
            auto_shift=False,
            gradient_accumulation=result.totals,
        )
        first = samples[0]
        assert payload.data[0].target_ids == first.tokens[1:]
        # Lists go out as given; the trainer casts them to the declared float32.
        assert payload.data[0].logprobs == first.logprobs[1:]
        assert payload.data[0].advantages == first.advantages[1:]


def test_too_short_sample_is_refused():
    group = TrajectoryGroup(
        [Trajectory([Transition([], TokensWithLogprobs([1]), 0.0, True)])], [0.0], [{}]
    )
    with pytest.raises(ValueError, match="at least 2"):
        to_pytrio_datums(trajectories_to_samples([group], [[0.0]]))
