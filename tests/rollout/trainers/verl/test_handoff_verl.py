"""The verl hand-off: padded tensors laid out as verl's agent loop lays them out."""

from __future__ import annotations

import sys

import pytest
import torch

from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.data.samples import trajectories_to_samples
from agentenvs.rollout.trainers.verl.handoff import from_verl_batch, to_tensordict, to_verl_batch


@pytest.fixture
def samples(tokenizer):
    """Two trajectories: a tool call in the middle of one, a short answer in the other.

    Token ids come from the test tokenizer so the pad id is a real one."""
    prompt = tokenizer.encode("What is 2+3?")
    call = tokenizer.encode("<code>2+3</code>")
    tool = tokenizer.encode("<interpreter>5</interpreter>")
    answer = tokenizer.encode("The answer is 5.")
    long_traj = Trajectory(
        [
            Transition(prompt, TokensWithLogprobs(call, [-0.5] * len(call)), 0.0, False),
            Transition(
                prompt + call + tool, TokensWithLogprobs(answer, [-0.25] * len(answer)), 1.0, True
            ),
        ]
    )
    short_traj = Trajectory(
        [Transition(prompt + prompt, TokensWithLogprobs(answer[:2], [-1.0, -2.0]), 0.0, True)]
    )
    group = TrajectoryGroup([long_traj, short_traj], [0.0, 0.0], [{}, {}])
    found = trajectories_to_samples([group], [[0.5, -0.5]])
    return found, (prompt, call, tool, answer)


def test_layout_matches_verl_agent_loop(samples, tokenizer):
    found, (prompt, call, tool, answer) = samples
    pad = tokenizer.pad_token_id
    batch = to_verl_batch(found, pad)
    P, R = 2 * len(prompt), len(call) + len(tool) + len(answer)
    assert batch["prompts"].shape == (2, P)
    assert batch["responses"].shape == (2, R)
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (2, P + R)
    assert batch["input_ids"].dtype == torch.int64

    # Row 0: prompt left-padded, response = call + tool output + answer, right-aligned pad.
    assert batch["prompts"][0].tolist() == [pad] * len(prompt) + prompt
    assert batch["responses"][0].tolist() == call + tool + answer
    assert batch["response_mask"][0].tolist() == [1] * len(call) + [0] * len(tool) + [1] * len(
        answer
    )
    assert batch["attention_mask"][0].tolist() == [0] * len(prompt) + [1] * (len(prompt) + R)
    assert batch["position_ids"][0].tolist() == [0] * len(prompt) + list(range(len(prompt) + R))
    assert batch["old_log_probs"][0].tolist() == (
        [-0.5] * len(call) + [0.0] * len(tool) + [-0.25] * len(answer)
    )
    assert batch["advantages"][0].tolist() == [0.5] * len(call) + [0.0] * len(tool) + [0.5] * len(
        answer
    )

    # Row 1: full-width prompt, two response tokens then padding with mask 0.
    assert batch["prompts"][1].tolist() == prompt + prompt
    assert batch["responses"][1].tolist() == answer[:2] + [pad] * (R - 2)
    assert batch["response_mask"][1].tolist() == [1, 1] + [0] * (R - 2)
    assert batch["old_log_probs"][1].tolist() == [-1.0, -2.0] + [0.0] * (R - 2)
    assert batch["advantages"][1].tolist() == [-0.5, -0.5] + [0.0] * (R - 2)
    assert batch["attention_mask"][1].tolist() == [1] * (P + 2) + [0] * (R - 2)
    assert batch["position_ids"][1].tolist() == list(range(P + 2)) + [P + 1] * (R - 2)

    assert torch.equal(batch["input_ids"], torch.cat([batch["prompts"], batch["responses"]], 1))
    assert torch.equal(batch["rollout_log_probs"], batch["old_log_probs"])
    assert batch["old_log_probs"].dtype == batch["advantages"].dtype == torch.float32
    assert batch["group_index"].tolist() == [0, 0] and batch["traj_index"].tolist() == [0, 1]
    assert batch["reward"].tolist() == [1.0, 0.0]
    # verl's compute_position_id_with_mask
    assert torch.equal(
        batch["position_ids"], torch.clip(torch.cumsum(batch["attention_mask"], -1) - 1, min=0)
    )


def test_fixed_widths_and_overlong_samples(samples):
    found, _ = samples
    longest_p = max(s.prompt_length for s in found)
    longest_r = max(len(s.tokens) - s.prompt_length for s in found)
    batch = to_verl_batch(found, 0, prompt_length=longest_p + 3, response_length=longest_r + 5)
    assert batch["prompts"].shape[1] == longest_p + 3
    assert batch["responses"].shape[1] == longest_r + 5
    back = from_verl_batch(batch)
    assert [s.tokens for s in back] == [s.tokens for s in found]
    with pytest.raises(ValueError, match="at most"):
        to_verl_batch(found, 0, response_length=longest_r - 1)
    with pytest.raises(ValueError, match="at most"):
        to_verl_batch(found, 0, prompt_length=longest_p - 1)
    with pytest.raises(ValueError, match="zero samples"):
        to_verl_batch([], 0)


def test_tensordict_and_the_error_without_it(samples, monkeypatch):
    found, _ = samples
    batch = to_verl_batch(found, 0)
    td = to_tensordict(batch)  # tensordict comes with the `verl` extra
    assert td.batch_size[0] == len(found)
    assert torch.equal(td["responses"], batch["responses"])
    monkeypatch.setitem(sys.modules, "tensordict", None)  # as where verl is not installed
    with pytest.raises(ImportError, match="tensordict"):
        to_tensordict(batch)
