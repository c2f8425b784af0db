"""The JSONL hand-off: one plain JSON object per sample, and a reader."""

from __future__ import annotations

import io
import json

import pytest

from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.data.advantages import compute_advantages, estimator_info
from agentenvs.rollout.data.samples import trajectories_to_samples
from agentenvs.rollout.trainers.jsonl.handoff import (
    iter_samples_jsonl,
    read_samples_jsonl,
    write_samples_jsonl,
)


def make_samples():
    broken = Trajectory(
        [
            Transition([1, 2], TokensWithLogprobs([3], [-0.5]), 0.0, False),
            Transition([7, 8], TokensWithLogprobs([9, 10], None), 1.0, True),  # prefix break
        ]
    )
    plain = Trajectory([Transition([1, 2], TokensWithLogprobs([4], [-1.25]), 0.0, True)])
    groups = [TrajectoryGroup([broken, plain], [0.0, 0.0], [{}, {}])]
    return trajectories_to_samples(groups, compute_advantages(groups, "rloo"))


def test_lines_are_plain_json_with_indices_and_reward(tmp_path):
    samples = make_samples()
    path = tmp_path / "train.jsonl"
    info = estimator_info("rloo")
    assert write_samples_jsonl(samples, path, extra=info) == 3
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(x["group_index"], x["traj_index"], x["sample_index"]) for x in lines] == [
        (0, 0, 0),
        (0, 0, 1),
        (0, 1, 0),
    ]
    assert lines[1] == {
        "group_index": 0,
        "traj_index": 0,
        "sample_index": 1,
        "reward": 1.0,
        "advantage": 1.0,  # rloo: 1 - mean of the others (0)
        "has_logprobs": False,
        "prompt_length": 2,
        "tokens": [7, 8, 9, 10],
        "loss_mask": [0, 0, 1, 1],
        "logprobs": [0.0, 0.0, 0.0, 0.0],
        "advantages": [0.0, 0.0, 1.0, 1.0],
        "extra": {"estimator": "rloo", "normalize_std": False},
    }
    assert read_samples_jsonl(path) == samples


def test_open_file_and_lazy_reader(tmp_path):
    samples = make_samples()
    buffer = io.StringIO()
    write_samples_jsonl(samples, buffer)
    path = tmp_path / "x.jsonl"
    path.write_text(buffer.getvalue() + "\n")  # a trailing blank line is fine
    assert list(iter_samples_jsonl(path)) == samples
    assert "extra" not in buffer.getvalue()


def test_malformed_line_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = json.dumps(
        {
            "group_index": 0,
            "traj_index": 0,
            "sample_index": 0,
            "reward": 0,
            "tokens": [1, 2],
            "loss_mask": [0, 1],
            "logprobs": [0, 0],
            "advantages": [0, 1],
        }
    )
    short = json.dumps(
        {
            "group_index": 0,
            "traj_index": 0,
            "sample_index": 0,
            "reward": 0,
            "tokens": [1, 2],
            "loss_mask": [0],
            "logprobs": [0, 0],
            "advantages": [0, 1],
        }
    )
    path.write_text(good + "\n" + short + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: .*2 tokens"):
        read_samples_jsonl(path)
    path.write_text(good + "\n{not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        read_samples_jsonl(path)
