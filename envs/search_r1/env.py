"""SearchR1Env: one question, searched and answered under either protocol.

Turn budget: ``max_turns`` turns may search (an invalid action uses one too, as in
Search-R1, so a model cannot stall forever); then one last turn is generated with
searching disabled (``</search>`` is no longer a stop sequence and a hint says to
answer). The episode ends at the first turn whose deciding block is an answer, or
after that last turn. Its reward is the score of the last ``<answer>`` in everything
the model wrote (Search-R1's rule), paid on the final step.

Retrieval failures (a dead server after its retries) raise :class:`RetrieverError`
by default, so the collector retries or fails the whole group instead of training
on a zero reward the model did not earn; ``on_retrieval_error="end"`` ends the
episode with stop reason ``retrieval_error`` instead (for evaluation runs).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from agentenvs.envs.forking import copy_task_state
from agentenvs.envs.search_r1 import prompts
from agentenvs.envs.search_r1.protocol import (
    TokenCounter,
    cut_at_first_stop,
    cut_to_budget,
    fit_to_budget,
    format_passages,
    information_wrapper,
    parse_tags,
    parse_tool_turn,
    tags_turn_well_formed,
    tool_error_json,
    tool_result_body,
    tool_result_json,
    tool_turn_well_formed,
)
from agentenvs.envs.search_r1.questions import QATask
from agentenvs.envs.search_r1.retrievers import make_retriever
from agentenvs.envs.search_r1.retrievers.base import Passage, QueryRejected, RetrieverError
from agentenvs.envs.search_r1.reward import score_response
from agentenvs.envs.text import Message, TextEnv, TextStep
from agentenvs.envs.tool_calls import CallFormat, ParseStatus, ToolCallAttempt, ToolOutcome
from agentenvs.envs.tool_calls import search_r1 as search_tags
from agentenvs.envs.tool_calls.record import step_logs
from agentenvs.envs.tool_calls.sniff import foreign_attempts
from agentenvs.envs.types import Metrics, SamplerStopReason, StopReason

if TYPE_CHECKING:
    from agentenvs.envs.search_r1.config import SearchR1Config

RETRIEVAL_ERROR = "retrieval_error"
QUERY_ERROR = "query_error"
WRONG_ANSWER = "nobody knows"


class SearchR1Env(TextEnv):
    def __init__(self, task: QATask, config: SearchR1Config, count_tokens: TokenCounter) -> None:
        self.task = task
        self.config = config
        self.count_tokens = count_tokens
        self.turns_used = 0  # turns that searched or were invalid
        self.searches = 0
        self.invalid = 0
        self.truncated = 0
        self.query_errors = 0
        self.actions: list[str] = []
        self.transcript: list[str] = []
        """Actions and the observations shown after them, in order: the response text
        Search-R1's reward reads (``answer_scope=prompt_and_response``)."""
        self.well_formed = True
        self.seen: list[str] = []  # raw text of each search's passages, for the oracle
        self._attempts: list[ToolCallAttempt] = []  # this step's tool-call attempts

    async def fork(self) -> SearchR1Env:
        """A copy of the episode's counters and past actions; the task, the config (and
        with it the process-wide retriever) and the token counter are shared, read-only."""
        return copy_task_state(self, shared=(self.task, self.config, self.count_tokens))

    # ---- prompt -----------------------------------------------------------------------
    @property
    def tool_protocol(self) -> bool:
        return self.config.protocol == "tool_call"

    def initial_messages(self) -> list[Message]:
        if self.task.prompt is not None:
            content = self.task.prompt
        else:
            template = self.config.prompt_template or (
                prompts.TOOL_PROMPT if self.tool_protocol else prompts.TAGS_PROMPT
            )
            content = prompts.render_prompt(template, self.task.question)
        messages: list[Message] = []
        if self.config.system_prompt:
            messages.append({"role": "system", "content": self.config.system_prompt})
        messages.append({"role": "user", "content": content})
        return messages

    def stop_sequences(self) -> list[str]:
        if self.tool_protocol:
            return []
        return ["</answer>"] if self.final_turn else ["</search>", "</answer>"]

    def tools(self) -> list[dict[str, Any]] | None:
        if not self.tool_protocol:
            return None
        text = self.config.text
        return [prompts.search_tool(text("tool_description"), text("tool_query_description"))]

    @property
    def final_turn(self) -> bool:
        return self.turns_used >= self.config.max_turns

    # ---- one turn ---------------------------------------------------------------------
    async def step(self, action_text: str, *, stop_reason: SamplerStopReason) -> TextStep:
        if self.config.parse_point == "first_stop" and not self.tool_protocol:
            action_text = cut_at_first_stop(action_text)
        self.actions.append(action_text)
        self.transcript.append(action_text)
        self._attempts = []
        if self.tool_protocol:
            result = await self._tool_step(action_text)
        else:
            result = await self._tags_step(action_text, stop_reason)
        self.transcript.append(_observation_text(result.observation))
        declared = [CallFormat.HERMES if self.tool_protocol else CallFormat.SEARCH_R1]
        attempts = self._attempts + foreign_attempts(action_text, declared)
        opener = "<tool_response>" if self.tool_protocol else "<information>"
        result.logs = {**result.logs, **step_logs(attempts, declared, opener)}
        return result

    def _outcome(self, indices: list[int], outcome: ToolOutcome) -> None:
        for index in indices:
            self._attempts[index] = self._attempts[index].with_outcome(outcome)

    async def _tags_step(self, text: str, stop_reason: SamplerStopReason) -> TextStep:
        action = parse_tags(text, stopped_on_sequence=stop_reason == "stop")
        self._attempts = search_tags.parse(text, stopped_on_sequence=stop_reason == "stop")
        ran = self._deciding_search() if action.kind == "search" else []
        self.well_formed &= tags_turn_well_formed(text)
        if action.kind == "answer":
            return self._finish(StopReason.COMPLETED)
        if self.final_turn:  # searching is disabled on the last turn
            return self._finish(StopReason.MAX_TURNS)
        self.turns_used += 1
        last = self.final_turn
        text = self.config.text
        suffix = text("last_turn") if last and self.config.last_turn_hint else ""
        next_stop = ["</answer>"] if last else None
        if action.kind == "invalid":
            self.invalid += 1
            self.well_formed = False
            return TextStep(
                text("invalid_action") + suffix, next_stop=next_stop, metrics=self._metrics()
            )
        try:
            hits = (await self._search([action.content]))[0]
        except QueryRejected as err:
            self._outcome(ran, ToolOutcome.ERROR)
            return self._query_rejected(err, text("query_rejected") + suffix, next_stop)
        except RetrieverError as err:
            self._outcome(ran, ToolOutcome.ERROR)
            return self._retrieval_failed(err)
        self._outcome(ran, ToolOutcome.OK)
        body = format_passages(hits) if hits else text("no_results")
        observation = self._information(body, suffix)
        return TextStep(observation, next_stop=next_stop, metrics=self._metrics())

    def _deciding_search(self) -> list[int]:
        """The index of the search block this turn runs (the first complete one); any
        later readable block is one search too many for a turn."""
        found = [
            i
            for i, a in enumerate(self._attempts)
            if a.status in (ParseStatus.OK, ParseStatus.INVALID_ARGUMENT)
        ]
        for index in found[1:]:
            if self._attempts[index].parsed:
                self._attempts[index] = self._attempts[index].with_status(
                    ParseStatus.TOO_MANY_CALLS, "one search per turn"
                )
        return found[:1]

    async def _tool_step(self, text: str) -> TextStep:
        turn = parse_tool_turn(text)
        self._attempts = sorted(
            [call.attempt() for call in turn.calls] + turn.unclosed, key=lambda a: a.span
        )
        ran = [i for i, a in enumerate(self._attempts) if a.parsed]
        self.well_formed &= tool_turn_well_formed(text)
        if turn.kind == "answer":
            return self._finish(StopReason.COMPLETED)
        if self.final_turn:
            return self._finish(StopReason.MAX_TURNS)
        self.turns_used += 1
        text = self.config.text
        last_hint = text("last_turn_tool") if self.final_turn and self.config.last_turn_hint else ""
        hint: list[Message] = [{"role": "user", "content": last_hint}] if last_hint else []
        if turn.kind == "invalid":
            self.invalid += 1
            self.well_formed = False
            message = " ".join(filter(None, [text("invalid_tool"), last_hint]))
            return TextStep({"role": "user", "content": message}, metrics=self._metrics())
        valid = [call for call in turn.calls if call.error is None]
        if len(valid) < len(turn.calls):
            self.well_formed = False
        limit = self.config.max_queries_per_turn
        asked = [q for call in valid for q in call.queries]
        queries = asked[:limit]
        try:
            found = await self._search(queries) if queries else []
        except QueryRejected as err:
            self._outcome(ran, ToolOutcome.ERROR)
            message = " ".join(filter(None, [text("query_rejected_tool"), last_hint]))
            return self._query_rejected(err, {"role": "user", "content": message}, None)
        except RetrieverError as err:
            self._outcome(ran, ToolOutcome.ERROR)
            return self._retrieval_failed(err)
        self._outcome(ran, ToolOutcome.OK)
        messages: list[Message] = []
        results = iter(found)
        budget = len(queries)
        for call in turn.calls:
            if call.error is not None:
                content = tool_error_json(call.error)
            else:
                take = min(len(call.queries), budget)
                budget -= take
                hits = [next(results) for _ in range(take)]
                dropped = len(call.queries) - take
                if not take:
                    self._drop(call.span, limit)
                note = prompts.dropped_queries_note(dropped, limit) if dropped else None
                content = (
                    self._tool_content(hits, note)
                    if hits
                    else tool_error_json(prompts.dropped_queries_note(dropped, limit))
                )
            messages.append({"role": "tool", "content": content})
        return TextStep(messages + hint, metrics=self._metrics())

    def _drop(self, span: tuple[int, int], limit: int | None) -> None:
        """The call at ``span`` had all its queries dropped by the per-turn limit."""
        for index, attempt in enumerate(self._attempts):
            if attempt.span == span:
                detail = f"over the limit of {limit} queries per turn"
                dropped = attempt.with_status(ParseStatus.TOO_MANY_CALLS, detail)
                self._attempts[index] = dropped.with_outcome(ToolOutcome.NOT_RUN)

    def _tool_content(self, hits: list[list[Passage]], note: str | None = None) -> str:
        def wrap(body: str) -> str:
            return tool_result_json(body, note)

        body = tool_result_body(hits, self.config.text("no_results"))
        content, cut = fit_to_budget(body, wrap, self.config.max_obs_tokens, self.count_tokens)
        self.truncated += cut
        return content

    def _information(self, body: str, suffix: str) -> str:
        """The ``<information>`` block, cut to the budget the configured way."""
        budget = self.config.max_obs_tokens
        if self.config.obs_truncation == "cut_end":
            block, cut = cut_to_budget(information_wrapper()(body), budget, self.count_tokens)
            self.truncated += cut
            return block + suffix
        observation, cut = fit_to_budget(
            body, information_wrapper(suffix), budget, self.count_tokens
        )
        self.truncated += cut
        return observation

    async def _search(self, queries: list[str]) -> list[list[Passage]]:
        retriever = make_retriever(self.config.retriever)
        found = await retriever.search(queries, self.config.retriever.topk)
        self.searches += 1
        self.seen.extend("\n".join(p.contents for p in hits) for hits in found)
        return found

    # ---- the end ----------------------------------------------------------------------
    def _metrics(self) -> Metrics:
        return {
            "searches": self.searches,
            "invalid_actions": self.invalid,
            "obs_truncated": self.truncated,
        }

    def scored_text(self) -> tuple[str, int]:
        """The text the reward reads and how many ``<answer>`` blocks it must hold.

        ``prompt_and_response`` is Search-R1's ``solution_str`` (the decoded prompt and
        response, retrieved blocks included: ``verl/trainer/main_ppo.py`` ``RewardManager``)
        read by ``qa_em.extract_solution`` (two blocks at least)."""
        if self.config.answer_scope == "prompt_and_response":
            prompt = "".join(str(m.get("content") or "") for m in self.initial_messages())
            return prompt + "".join(self.transcript), 2
        return "".join(self.actions), 1

    def _finish(self, reason: str) -> TextStep:
        text, min_blocks = self.scored_text()
        score = score_response(
            text,
            self.task.golden_answers,
            min_blocks=min_blocks,
            mode=self.config.reward,
            well_formed=self.well_formed and reason == StopReason.COMPLETED,
            format_weight=self.config.format_weight,
        )
        metrics = self._metrics()
        metrics.update(
            answered=int(score.answer is not None),
            em=score.em,
            f1=score.f1,
            well_formed=int(score.well_formed),
        )
        logs: dict[str, str | int | float] = {
            "task_id": self.task.id,
            "answer": score.answer or "",
            "golden_answers": json.dumps(list(self.task.golden_answers)),
        }
        return TextStep(
            reward=score.reward, done=True, stop_reason=reason, metrics=metrics, logs=logs
        )

    def _query_rejected(
        self, err: QueryRejected, observation: str | Message, next_stop: list[str] | None
    ) -> TextStep:
        """The server refused this episode's query: this episode alone pays for it."""
        self.invalid += 1
        self.query_errors += 1
        self.well_formed = False
        logs = {"task_id": self.task.id, "query_error": str(err)[:500]}
        if self.config.on_query_error == "end":
            metrics = {**self._metrics(), "query_errors": self.query_errors}
            return TextStep(
                reward=0.0, done=True, stop_reason=QUERY_ERROR, metrics=metrics, logs=logs
            )
        metrics = {**self._metrics(), "query_errors": self.query_errors}
        return TextStep(observation, next_stop=next_stop, metrics=metrics, logs=logs)

    def _retrieval_failed(self, err: RetrieverError) -> TextStep:
        if self.config.on_retrieval_error == "raise":
            raise err
        return TextStep(
            reward=0.0,
            done=True,
            stop_reason=RETRIEVAL_ERROR,
            metrics={**self._metrics(), "retrieval_errors": 1},
            logs={"task_id": self.task.id, "error": str(err)[:500]},
        )

    # ---- scripted policies ------------------------------------------------------------
    def scripted_action(self, variant: str = "oracle") -> str | None:
        """``oracle`` searches each hop, checks the passages, answers; ``wrong`` searches
        then answers wrongly; ``malformed`` never uses the protocol's tags."""
        hops = [h.query for h in self.task.hops] or [self._question_query()]
        if variant == "malformed":
            return f"I believe the answer is {self.task.golden_answers[0]}."
        if variant == "wrong":
            if self.searches == 0 and not self.final_turn:
                return self._search_text(hops[0])
            return self._answer_text(WRONG_ANSWER)
        if variant != "oracle":
            return None
        if self.searches < len(hops) and not self.final_turn:
            return self._search_text(hops[self.searches])
        return self._answer_text(self._oracle_answer())

    def _question_query(self) -> str:
        """The bare question as a query (a pre-rendered prompt loses its instructions)."""
        text = self.task.question.rsplit("Question:", 1)[-1]
        return " ".join(re.sub(r"</?[A-Za-z_]+>", " ", text).split())

    def _oracle_answer(self) -> str:
        """The golden answer only if every hop's evidence showed up in its results."""
        for i, hop in enumerate(self.task.hops):
            if hop.evidence and (i >= len(self.seen) or hop.evidence not in self.seen[i]):
                return "unknown"
        return self.task.golden_answers[0]

    def _search_text(self, query: str) -> str:
        if self.tool_protocol:
            call = json.dumps({"name": "search", "arguments": {"query_list": [query]}})
            return f"<think>I will search for it.</think>\n<tool_call>{call}</tool_call>"
        return f"<think>I need to look up: {query}.</think>\n<search> {query} </search>"

    def _answer_text(self, answer: str) -> str:
        return f"<think>I can answer now.</think>\n<answer> {answer} </answer>"


def _observation_text(observation: str | Message | list[Message] | None) -> str:
    """The text of an observation as it joins the response (message contents in order)."""
    if observation is None:
        return ""
    if isinstance(observation, str):
        return observation
    messages = [observation] if isinstance(observation, dict) else observation
    return "".join(str(m.get("content") or "") for m in messages)
