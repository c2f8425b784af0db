"""RenderedEnv: a TextEnv plus a renderer plus limits is a token-level Env.

All limit handling lives here so every environment ends episodes the same way:
each limit ends the episode with a recorded one-hot ``stop/<reason>`` metric,
never with an exception.

Two records let ``agentenvs check`` audit the tokens later: the step metrics
``renderer/control_strings_split`` (observations) and
``renderer/prompt_control_strings_split`` (the prompt, on the first step) count
control-token strings in environment text that were tokenized as plain text, and the step logs ``prompt_control_at`` /
``observation_control_at`` list where the template placed control tokens in the
new context tokens (offsets from their start), so a control id anywhere else in an
observation span was not put there by the template.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentenvs.envs.renderers import Renderer
from agentenvs.envs.text import Message, TextEnv, TextStep
from agentenvs.envs.tool_calls.record import TOOL_CALLS_LOG, with_token_spans
from agentenvs.envs.types import (
    Action,
    ActionExtra,
    Env,
    ImagePlacement,
    Metrics,
    Observation,
    StepResult,
    StopCondition,
    StopReason,
    stop_metric,
    with_images,
)

SPLIT_CONTROLS_METRIC = "renderer/control_strings_split"
"""Control-token strings in an observation's environment text, tokenized as plain text."""
PROMPT_SPLIT_CONTROLS_METRIC = "renderer/prompt_control_strings_split"
"""The same in the prompt's messages (which may name protocol tags such as <tool_call>)."""
OUT_OF_VOCABULARY_METRIC = "invalid/out_of_vocabulary_tokens"
OUT_OF_VOCABULARY = "out_of_vocabulary"
"""Stop reason of an action holding ids the tokenizer cannot decode (padded embedding rows)."""
PROMPT_CONTROLS_LOG = "prompt_control_at"
OBSERVATION_CONTROLS_LOG = "observation_control_at"


def control_offsets(positions: list[int]) -> str:
    """Offsets as the comma-separated string a log value can hold."""
    return ",".join(map(str, positions))


class Limits(BaseModel):
    """Episode limits shared by every environment."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(10, ge=1, description="Actions per episode.")
    max_tokens_per_turn: int | None = Field(
        None, ge=1, description="Longest single action; a longer one ends the episode."
    )
    max_trajectory_tokens: int | None = Field(
        None, ge=1, description="Context budget: prompt, actions and observations together."
    )
    max_response_tokens: int | None = Field(
        None,
        ge=1,
        description="Episode response budget (verl's response_length): every token after the "
        "prompt, the model's and the env's; each turn may use what is left, and the episode ends "
        "(stop response_budget, scored by the task) when it is used up.",
    )
    max_prompt_tokens: int | None = Field(
        None,
        ge=1,
        description="Longest prompt a sample may start from (verl's max_prompt_length): the first "
        "prompt, and every fresh prompt of a restarting (windowed) renderer; a longer one ends "
        "the episode (context_overflow).",
    )
    on_truncated_action: Literal["end", "pass"] = Field(
        "end",
        description="When the sampler stopped on its token cap: end the episode (max_tokens), "
        "or pass the cut-off text to the task.",
    )
    truncation_reward: float = Field(
        0.0, description="Reward when an action is cut off by the per-turn token cap."
    )
    overflow_reward: float = Field(
        0.0, description="Reward when the context budget ends the episode."
    )


class RenderedEnv(Env):
    def __init__(self, task: TextEnv, renderer: Renderer, limits: Limits | None = None) -> None:
        self.task = task
        self.renderer = renderer
        self.limits = limits or Limits()
        self.history: list[Message] = []
        self.context: list[int] = []
        self.images: list[ImagePlacement] = []
        """The images the context shows (offsets into it), for vision policies."""
        self.turns = 0
        self.prefix_breaks = 0
        self.done = False
        self.closed = False
        self._stops: list[str] = []
        self._action_text = ""
        """The decoded text of the last action, kept in the step's logs so a stored
        trajectory can be checked against its tokens later."""
        self._pending_logs: dict[str, str] = {}
        self._pending_split = 0
        self.response_tokens = 0
        """Tokens after the prompt so far, the model's and the env's (what
        ``limits.max_response_tokens`` bounds; a restarted prompt is not counted)."""
        self._prompt_too_long = False

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        try:  # the task opens its connection first (declared: TextEnv.start)
            await self.task.start()
        except BaseException:  # a failed start leaves no server session behind
            await self.close()
            raise
        self.history = list(self.task.initial_messages())
        self.context = self.renderer.initial_tokens(self.history, self.task.tools())
        self.images = list(self.renderer.prompt_images)
        self._stops = list(self.task.stop_sequences())
        # The prompt has no step of its own: its records ride on the first step.
        self._pending_split = self.renderer.prompt_split_controls
        self._pending_logs = {
            PROMPT_CONTROLS_LOG: control_offsets(self.renderer.text.control_positions(self.context))
        }
        # An over-long prompt is the data's fault, not the model's: the first step ends
        # the episode (context_overflow) rather than raising out of the rollout.
        self._prompt_too_long = self._over_prompt_cap(len(self.context))
        return with_images(self.context, self.images), self.stop_condition()

    def _step_records(self, metrics: Metrics, logs: dict) -> dict:
        """Adds what the prompt left pending to the first step's metrics; returns logs."""
        if self._pending_split:
            metrics[PROMPT_SPLIT_CONTROLS_METRIC] = self._pending_split
            self._pending_split = 0
        merged = {**logs, **self._pending_logs}
        self._pending_logs = {}
        return merged

    def stop_condition(self) -> list[str]:
        return self.renderer.stop_condition(self._stops)

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        if self.done:
            raise RuntimeError("step() called on a finished episode; envs are single-use")
        sampler_stop = (extra or {}).get("stop_reason", "stop")
        self.turns += 1
        self.context.extend(action)
        self.response_tokens += len(action)
        content, marker = self.renderer.split_action(action)
        self._action_text = content + marker

        vocabulary = self.renderer.vocabulary_size
        if vocabulary is not None and action and max(action) >= vocabulary:
            # Real checkpoints pad the embedding past the vocabulary; such an id decodes
            # to nothing, so the text the task would read is not what was sampled.
            outside = [i for i, t in enumerate(action) if t >= vocabulary]
            return await self._finish(
                TextStep(
                    metrics={OUT_OF_VOCABULARY_METRIC: len(outside)},
                    logs={"out_of_vocabulary_at": outside[0]},
                ),
                OUT_OF_VOCABULARY,
            )
        if self._prompt_too_long:
            return await self._end_by_limit(TextStep(), StopReason.CONTEXT_OVERFLOW)
        cap = self.limits.max_tokens_per_turn
        overran = cap is not None and len(action) > cap
        spent = self._budget_spent()
        # A cut that the episode budget made is the budget's end, not a per-turn truncation.
        cut_by_turn_cap = sampler_stop == "length" and not spent
        if overran or (cut_by_turn_cap and self.limits.on_truncated_action == "end"):
            return await self._end_by_limit(
                TextStep(reward=self.limits.truncation_reward), StopReason.MAX_TOKENS
            )
        budget = self.limits.max_trajectory_tokens
        if budget is not None and len(self.context) > budget:
            # An action that fits the budget exactly is still judged: it may be the answer.
            return await self._end_by_limit(TextStep(), StopReason.CONTEXT_OVERFLOW)

        result = await self.task.step(content, stop_reason=sampler_stop)
        if TOOL_CALLS_LOG in result.logs:  # the task parsed text: say which tokens each call is
            logs = with_token_spans(result.logs, action, self.renderer.decode)
            result = dataclasses.replace(result, logs=logs)
        if result.done:
            return await self._finish(result, result.stop_reason or StopReason.COMPLETED)
        if spent:  # verl: no turn follows once the response budget is used up
            return await self._end_by_limit(result, StopReason.RESPONSE_BUDGET)
        if self.turns >= self.limits.max_turns:
            return await self._end_by_limit(result, StopReason.MAX_TURNS)
        if result.next_stop is not None:
            self._stops = list(result.next_stop)

        metrics: Metrics = dict(result.metrics)
        logs = dict(result.logs)
        if result.observation is not None:
            appended = self.renderer.append(
                self.history, self.task.tools(), content, marker, result.observation
            )
            if appended.split_controls:
                metrics[SPLIT_CONTROLS_METRIC] = appended.split_controls
            logs[OBSERVATION_CONTROLS_LOG] = control_offsets(
                self.renderer.text.control_positions(appended.tokens)
            )
            if appended.restart:
                self.prefix_breaks += 1
                metrics["renderer/prefix_breaks"] = 1
                total = len(appended.tokens)
                if self._over_budget_total(total) or self._over_prompt_cap(total):
                    return await self._end_by_limit(result, StopReason.CONTEXT_OVERFLOW, metrics)
                self.context = list(appended.tokens)
                self.images = list(appended.images)
            else:
                if self._over_budget(len(appended.tokens)):
                    return await self._end_by_limit(result, StopReason.CONTEXT_OVERFLOW, metrics)
                if self._budget_spent(len(appended.tokens)):
                    # verl drops an observation that would use up the budget and ends.
                    return await self._end_by_limit(result, StopReason.RESPONSE_BUDGET, metrics)
                self.images += [p.shifted(len(self.context)) for p in appended.images]
                self.context.extend(appended.tokens)
                self.response_tokens += len(appended.tokens)
        return StepResult(
            reward=result.reward,
            episode_done=False,
            next_observation=with_images(self.context, self.images),
            next_stop_condition=self.stop_condition(),
            metrics=metrics,
            logs={**self._step_records(metrics, logs), "action_text": self._action_text},
        )

    def _budget_spent(self, extra_tokens: int = 0) -> bool:
        """The response budget is used up with ``extra_tokens`` more (verl's ``>=``)."""
        budget = self.limits.max_response_tokens
        return budget is not None and self.response_tokens + extra_tokens >= budget

    def _over_prompt_cap(self, prompt_tokens: int) -> bool:
        cap = self.limits.max_prompt_tokens
        return cap is not None and prompt_tokens > cap

    def _over_budget(self, extra_tokens: int) -> bool:
        return self._over_budget_total(len(self.context) + extra_tokens)

    def _over_budget_total(self, total: int) -> bool:
        budget = self.limits.max_trajectory_tokens
        # Leave room for at least one sampled token after the observation.
        return budget is not None and total + 1 > budget

    async def _end_by_limit(
        self, result: TextStep, reason: StopReason, metrics: Metrics | None = None
    ) -> StepResult:
        """A shared limit, not the task, ends the episode; the task may score the ending."""
        reward = result.reward
        if reason == StopReason.CONTEXT_OVERFLOW:
            reward += self.limits.overflow_reward
        ending = self.task.on_limit(str(reason))
        if ending is not None:
            reward += ending.reward
            result = dataclasses.replace(
                result,
                metrics={**ending.metrics, **result.metrics},
                logs={**ending.logs, **result.logs},
            )
        return await self._finish(dataclasses.replace(result, reward=reward), reason, metrics)

    async def _finish(
        self, result: TextStep, reason: str, metrics: Metrics | None = None
    ) -> StepResult:
        self.done = True
        merged: Metrics = {**result.metrics, **(metrics or {})}
        merged[stop_metric(str(reason))] = 1
        merged["turns"] = self.turns
        logs = self._step_records(merged, dict(result.logs))
        await self.close()
        return StepResult(
            reward=result.reward,
            episode_done=True,
            next_observation=[],
            next_stop_condition=[],
            metrics=merged,
            logs={**logs, "action_text": self._action_text},
        )

    def max_action_tokens(self) -> int | None:
        """The per-turn cap of :attr:`limits` and what is left of the response budget,
        whichever is smaller, so the sampler stops there (and says ``length``) rather
        than this env ending an action that ran past it."""
        caps = [self.limits.max_tokens_per_turn]
        budget = self.limits.max_response_tokens
        if budget is not None:
            caps.append(max(1, budget - self.response_tokens))
        known = [cap for cap in caps if cap is not None]
        return min(known) if known else None

    def max_response_tokens(self) -> int | None:
        return self.limits.max_response_tokens

    async def fork(self) -> RenderedEnv:
        """An independent copy of this live episode (see :mod:`agentenvs.envs.forking`)."""
        from agentenvs.envs.forking import fork_rendered

        return await fork_rendered(self)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.task.close()

    def label(self) -> str:
        """The task's class: a rendered env is named for the text env it renders."""
        return type(self.task).__name__

    def scripted_action(self, variant: str = "oracle") -> tuple[list[int], str] | None:
        """The scripted policy's next action as (tokens, sampler stop reason).

        A text that ends on one of the current stop sequences stops there, like a
        sampler honouring it; otherwise the renderer's end-of-turn token is added.
        """
        text = self.task.scripted_action(variant)
        if text is None:
            return None
        tokens = self.renderer.encode(text)
        if any(text.endswith(s) for s in self.stop_condition() if s):
            return tokens, "stop"
        return tokens + self.renderer.end_of_turn_tokens(), "eos"
