"""verl 0.9.1's own rollout code drives the ``agentenvs`` agent loop on a real vLLM engine.

verl's ``AgentLoopManager.create`` starts its ``AgentLoopWorker`` Ray actor, which
loads the agent loop config file, reads verl's ``RLHFDataset`` rows, instantiates
this project's loop per row with hydra and pads the outputs into verl's batch;
verl's ``LLMServerClient`` and sticky-session load balancer route every turn to the
suite's vLLM-CPU server. The server verl's balancer holds is ours, not verl's
``vLLMHttpServer``: ``OpenAIServerReplica`` in ``tests/support/verl_engine.py``, a Ray
actor with verl's server interface that forwards each request over HTTP. The
tests check verl's batch against this project's verl hand-off of the same
episodes, which verl carries in its non-tensor batch.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from support.verl_engine import VerlRollout, VerlRolloutSetup, local_ray, run_verl_rollout
from support.vllm_server import SERVED_NAME, vllm_server  # noqa: F401  (the session fixture)
from transformers import AutoTokenizer

from agentenvs.rollout.data.samples import TrainingSample
from agentenvs.rollout.trainers.common import one_sample
from agentenvs.rollout.trainers.verl.agent_loop import VERL_AVAILABLE, trajectories_from_verl_batch
from agentenvs.rollout.trainers.verl.handoff import to_verl_batch

pytestmark = pytest.mark.services  # starts a real service

# verl is part of the suite (`make test` runs `make verl`): missing, these tests fail.
assert VERL_AVAILABLE, "verl is not installed: run `make verl`"

LIMITS = {"max_turns": 3, "max_tokens_per_turn": 12, "on_truncated_action": "pass"}
ENVS: dict[str, dict[str, Any]] = {
    "guess_number": {"tasks": 2, "limits": LIMITS},
    "search_r1": {"max_turns": 2, "limits": LIMITS},
    "retool": {"limits": LIMITS},
    "alfworld": {"data": "shipped", "limits": LIMITS},
}
SETUP = VerlRolloutSetup(prompt_length=1024, response_length=512, rollout_n=2)
PROMPTS = 2
# The padded fields verl's agent loop worker builds, all of which the hand-off builds too.
VERL_FIELDS = (
    "prompts", "responses", "input_ids", "attention_mask", "position_ids",
    "response_mask", "rollout_log_probs", "rm_scores",
)  # fmt: skip


@pytest.fixture(scope="module")
def ray_session():
    with local_ray(num_cpus=2) as session:
        yield session


@pytest.fixture(scope="module")
def rollout(ray_session, vllm_server, tmp_path_factory) -> VerlRollout:  # noqa: F811
    """One verl rollout over every environment (one agent loop entry each)."""
    return run_verl_rollout(
        vllm_server.url, SERVED_NAME, vllm_server.model_dir, ENVS,
        n_prompts=PROMPTS, setup=SETUP, work_dir=tmp_path_factory.mktemp("verl"),
    )  # fmt: skip


def handoff_samples(output: Any) -> list[TrainingSample]:
    """This project's samples for the episodes behind verl's rows, rewarded as verl was."""
    samples = []
    rewards = [float(r) for r in output.non_tensor_batch["group_reward"]]
    for row, traj in enumerate(trajectories_from_verl_batch(output.non_tensor_batch)):
        sample, dropped = one_sample(traj)
        assert dropped == 0
        sample.reward = traj.step_reward + rewards[row]
        sample.traj_index = row
        samples.append(sample)
    return samples


@pytest.mark.parametrize("env", list(ENVS))
def test_verl_batch_equals_the_handoff_of_the_same_episodes(env, rollout):
    output = rollout.of_env(env)
    batch = output.batch
    rows = PROMPTS * SETUP.rollout_n
    assert batch["prompts"].shape == (rows, SETUP.prompt_length)
    assert batch["responses"].shape == (rows, SETUP.response_length)

    samples = handoff_samples(output)
    pad = AutoTokenizer.from_pretrained(rollout.config.actor_rollout_ref.model.path).pad_token_id
    ours = to_verl_batch(
        samples, pad, prompt_length=SETUP.prompt_length, response_length=SETUP.response_length
    )
    for key in VERL_FIELDS:
        theirs = batch[key]
        assert ours[key].shape == theirs.shape, key
        assert torch.equal(ours[key].to(theirs.dtype), theirs), key

    # Mask 1 exactly on the tokens the engine sampled, in order; the environment's
    # tokens between the actions are in the response at mask 0.
    served = rollout.requests
    for row, sample in enumerate(samples):
        full = sample.tokens
        # This row's requests: those whose context and answer start its sequence. Two
        # rows of a group may sample the same turn: identical requests count once.
        turns = {
            len(q.prompt_ids): q.token_ids
            for q in served
            if full[: len(q.prompt_ids) + len(q.token_ids)] == q.prompt_ids + q.token_ids
        }
        answers = [turns[n] for n in sorted(turns)]
        mask = batch["response_mask"][row]
        response = batch["responses"][row]
        assert response[mask.bool()].tolist() == [t for a in answers for t in a], row
        assert batch["rm_scores"][row].sum().item() == pytest.approx(sample.reward)
        # One run of mask 1 per action, the observations between them at mask 0.
        length = int(batch["attention_mask"][row, SETUP.prompt_length :].sum())
        runs = torch.diff(mask[:length], prepend=torch.tensor([0])).eq(1).sum().item()
        episode = trajectories_from_verl_batch(output.non_tensor_batch)[row]
        assert runs == len(answers) == len(episode.transitions)
    env_tokens = (batch["attention_mask"][:, SETUP.prompt_length :] == 1) & (
        batch["response_mask"] == 0
    )
    assert (batch["rollout_log_probs"][env_tokens] == 0).all()
    assert (batch["rollout_log_probs"][batch["response_mask"].bool()] < 0).any()


@pytest.mark.parametrize("env", list(ENVS))
def test_provenance_and_groups_survive_verls_batch(env, rollout):
    extra = rollout.of_env(env).non_tensor_batch
    tasks = [t["task_index"] for t in extra["agentenvs_task"]]
    # rollout.n copies of each prompt, interleaved: one GRPO group per task.
    assert tasks == [i for i in range(PROMPTS) for _ in range(SETUP.rollout_n)]
    assert [t["env"] for t in extra["agentenvs_task"]] == [env] * len(tasks)
    assert [e["index"] for e in extra["extra_info"]] == tasks
    sessions = []
    for traj in trajectories_from_verl_batch(extra):
        logs = [tr.logs for tr in traj.transitions]
        assert {entry["policy/verl_session"] for entry in logs} == {logs[0]["policy/verl_session"]}
        assert all(entry["policy/global_steps"] == 0 for entry in logs)
        sessions.append(logs[0]["policy/verl_session"])
    assert len(set(sessions)) == len(sessions)  # one session per row
    assert list(extra["min_global_steps"]) == list(extra["max_global_steps"]) == [0] * len(tasks)


def test_env_config_and_stop_conditions_reach_the_engine(rollout):
    """Every row runs with its agent loop entry's env_config (the per-turn cap), and
    the environment's stop strings arrive at the engine through verl's client."""
    assert rollout.requests
    for request in rollout.requests:
        assert request.sampling_params["max_tokens"] <= LIMITS["max_tokens_per_turn"]
        assert request.sampling_params["stop"]
        assert request.sampling_params["logprobs"] is True
    output = rollout.of_env("guess_number")
    guesses = [q for q in rollout.requests if "</guess>" in q.sampling_params["stop"]]
    assert len(guesses) == sum(m["turns"] for m in output.non_tensor_batch["env_metrics"])
    turns = [m["turns"] for m in output.non_tensor_batch["env_metrics"]]
    assert all(t == LIMITS["max_turns"] for t in turns), turns
    # ...so the responses hold the environment's tokens between the actions.
    batch = output.batch
    inside = (batch["attention_mask"][:, SETUP.prompt_length :] == 1) & (
        batch["response_mask"] == 0
    )
    assert inside.any(dim=1).all()


def test_verl_sends_a_fresh_request_id_per_turn(rollout):
    """The loop's request id routes the episode (sticky session); verl's client
    hands the engine a new id for every turn."""
    engine_ids = [q.request_id for q in rollout.requests]
    assert len(set(engine_ids)) == len(engine_ids)
    sessions = {
        tr.logs["policy/verl_session"]
        for traj in trajectories_from_verl_batch(rollout.output.non_tensor_batch)
        for tr in traj.transitions
    }
    assert len(sessions) == len(rollout.output)  # one per row, shared by its turns
    assert not sessions & set(engine_ids)
    turns = sum(m["turns"] for m in rollout.output.non_tensor_batch["env_metrics"])
    assert len(engine_ids) == turns
