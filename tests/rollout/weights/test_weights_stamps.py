"""The typed answer to "which weights, which version" matches what the records store.

The stored form (``policy/...`` log keys, ``provenance["policy"]``) is unchanged;
:class:`SampledBy` reads it back, for a record and for one trajectory.
"""

from __future__ import annotations

from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.envs.weights_identity import WeightsIdentity
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.weights.stamps import SampledBy, TurnStamp, with_turn_versions


def _turn(logs: dict) -> Transition:
    return Transition(
        ob=[1], ac=TokensWithLogprobs([2], [0.0], "stop"), reward=0.0, episode_done=False, logs=logs
    )


def _group(*stamps: list[dict]) -> TrajectoryGroup:
    trajs = [Trajectory([_turn(logs) for logs in turns], [], "done") for turns in stamps]
    return TrajectoryGroup(trajs, [0.0] * len(trajs), [{}] * len(trajs))


def test_a_record_answers_with_its_recorded_version_every_turn_and_the_identity():
    identity = WeightsIdentity(version=3, path="lora", name="a", sha256="0123456789abcdef")
    older = WeightsIdentity(version=2, path="lora", name="a", sha256="ffffffffffffffff")
    group = _group(
        [{"policy/weights_version": 3, "policy/weights": "lora:a@01234567"}],
        [{"policy/weights_version": 2, "policy/weights": "lora:a@ffffffff"}, {}],
    )
    seen = [older.to_json(), identity.to_json()]
    described = with_turn_versions({"weights": identity.to_json(), "weights_seen": seen}, group)
    assert "weights_seen" not in described  # used, not recorded
    assert described["weights_newest"] == identity.to_json()
    record = GroupRecord("k", "env", "t", group, provenance={"policy": described})
    stored = record.to_json()

    sampled = record.sampled_by()
    assert sampled.version == 2 == described["weights_version"]
    assert sampled.versions == (2, 3)
    assert sampled.turns == (
        TurnStamp(0, 0, 3, "lora:a@01234567"),
        TurnStamp(1, 0, 2, "lora:a@ffffffff"),
    )
    assert sampled.label == "lora:a@ffffffff"
    assert sampled.weights == older  # the identity of the version the record claims
    assert record.to_json() == stored  # reading it changed nothing
    assert GroupRecord.from_json(stored).sampled_by() == sampled


def test_a_policy_that_does_not_stamp_keeps_its_declared_version():
    record = GroupRecord(
        "k", "env", "t", _group([{}]), provenance={"policy": {"weights_version": 7}}
    )
    assert record.sampled_by() == SampledBy(7)
    assert record.sampled_by().label is None
    empty = GroupRecord("k", "env", "t", None, status="failed")
    assert empty.sampled_by() == SampledBy(None)


def test_one_trajectory_answers_from_its_own_stamps():
    group = _group([{"policy/weights_version": "b"}, {"policy/weights_version": 1}])
    sampled = SampledBy.of_trajectory(group.trajectories[0])
    assert (sampled.version, sampled.versions, sampled.label) == (1, (1, "b"), None)
    assert SampledBy.of_trajectory(_group([{}]).trajectories[0]).version is None


def test_a_mixed_group_never_claims_the_newest_identity_for_its_oldest_version():
    """The policy no longer knows the claimed version's identity: none rather than v3's."""
    identity = WeightsIdentity(version=3, path="full", name="m", verified=True)
    group = _group([{"policy/weights_version": 3}], [{"policy/weights_version": 2}])
    described = with_turn_versions({"weights": identity.to_json()}, group)
    assert described["weights_version"] == 2 and "weights" not in described
    assert described["weights_newest"] == identity.to_json()
    record = GroupRecord("k", "env", "t", group, provenance={"policy": described})
    assert record.sampled_by().weights is None
    # One version only: the policy's identity is that version's, kept as it is.
    single = with_turn_versions(
        {"weights": identity.to_json()}, _group([{"policy/weights_version": 3}])
    )
    assert single["weights"] == identity.to_json() and "weights_newest" not in single
