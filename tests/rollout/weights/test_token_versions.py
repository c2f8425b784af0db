"""Per-token versions as runs: the stored form, reading it back, and what cannot be true."""

from __future__ import annotations

import json

from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.data.samples import trajectory_to_samples
from agentenvs.rollout.trainers.jsonl.handoff import sample_from_json, sample_to_json
from agentenvs.rollout.weights.drift import trained_versions
from agentenvs.rollout.weights.stamps import SampledBy, with_turn_versions
from agentenvs.rollout.weights.token_versions import (
    RUNS_LOG,
    VersionRun,
    merge_runs,
    runs_problem,
    runs_to_log,
    token_versions,
)


def _turn(n: int, logs: dict, ob: list[int] | None = None) -> Transition:
    action = TokensWithLogprobs(list(range(100, 100 + n)), [-0.5] * n, "length")
    return Transition(ob=ob or [1, 2], ac=action, reward=0.0, episode_done=False, logs=logs)


def _spanning(runs: list[VersionRun], n: int) -> Transition:
    logs = {"policy/weights_version": runs[0].version, RUNS_LOG: runs_to_log(runs)}
    return _turn(n, logs)


def test_a_turn_of_one_version_reads_as_one_run_and_stores_nothing_new():
    plain = _turn(3, {"policy/weights_version": 4, "policy/weights_proof": "verified"})
    assert token_versions(plain) == [4, 4, 4]
    assert runs_problem(plain) is None
    assert token_versions(_turn(2, {})) == [None, None]  # a policy that does not stamp


def test_runs_give_each_token_its_version_through_samples_drift_and_the_jsonl_handoff():
    runs = merge_runs(
        [VersionRun(2, 1, None), VersionRun(0, 1, None), VersionRun(3, 2, "verified")]
    )
    assert runs == (VersionRun(2, 1, None), VersionRun(3, 2, "verified"))
    tr = _spanning(list(runs), 5)
    assert token_versions(tr) == [1, 1, 2, 2, 2] and runs_problem(tr) is None
    traj = Trajectory([tr], [], "done")
    (sample,) = trajectory_to_samples(traj, 1.0)
    assert sample.token_versions == [None, None, 1, 1, 2, 2, 2]
    assert len(sample.token_versions) == len(sample.tokens)
    assert sample_from_json(json.loads(json.dumps(sample_to_json(sample)))).token_versions == (
        sample.token_versions
    )
    assert trained_versions(traj) == [1, 1, 2, 2, 2]
    group = TrajectoryGroup([traj], [0.0], [{}])
    assert SampledBy.of_group(group).versions == (1, 2)
    assert with_turn_versions({}, group)["weights_versions"] == [1, 2]


def test_runs_that_cannot_be_true_are_named():
    good = [VersionRun(2, 1), VersionRun(3, 2)]
    short = _spanning(good, 6)
    assert "cover 5 tokens but the action has 6" in runs_problem(short)
    backwards = _turn(
        5,
        {"policy/weights_version": 2, RUNS_LOG: runs_to_log([VersionRun(2, 2), VersionRun(3, 1)])},
    )
    assert "do not move forward" in runs_problem(backwards)
    elsewhere = _turn(5, {"policy/weights_version": 3, RUNS_LOG: runs_to_log(good)})
    assert "is not the turn's stamped version" in runs_problem(elsewhere)
    garbage = _turn(5, {"policy/weights_version": 1, RUNS_LOG: "[[2, 1]"})
    assert "is not a list of runs" in runs_problem(garbage)
    # Readers never misalign: broken runs read as the turn's stamp on every token.
    assert token_versions(short) == [1] * 6
