"""One ReTool episode: a math problem, a code interpreter, a graded final answer.

The model's code runs in the process-wide shared sandbox (see
:mod:`agentenvs.envs.retool.sandboxes`), either as independent programs
(``stateless``) or as cells of one per-episode session (``stateful``). Whatever
the model writes, the episode ends or continues with a recorded stop reason:

================  =========================================================
``completed``     the turn ended without a tool call and with a ``\\boxed{}``
``no_answer``     the turn ended without a tool call and without a box
``parse_error``   a code block or tool call that cannot be read (``on_malformed=end``)
``empty_code``    an empty code block (``on_malformed=end``)
``max_tool_calls``  one call more than ``max_tool_calls`` (``on_max_tool_calls=end``)
``max_turns``     the last allowed turn did not answer
================  =========================================================

A sandbox that cannot run anything (not the code failing: the sandbox itself) is
an infrastructure fault and raises :class:`SandboxFailure`, so the collector
retries the group instead of training on a reward the model did not earn.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import TYPE_CHECKING, Any

from agentenvs.envs.errors import TransientError
from agentenvs.envs.forking import copy_task_state
from agentenvs.envs.retool import prompts
from agentenvs.envs.retool.output import TokenCounter, render_result, truncate
from agentenvs.envs.retool.problems import Problem
from agentenvs.envs.retool.protocol import (
    CODE_CLOSE,
    FORMATS,
    code_action,
    interpreter_block,
    parse_action,
    parse_tool_calls_verl,
    print_last_line,
    prose_text,
    tool_message,
    tool_spec,
)
from agentenvs.envs.retool.reward import grade, last_boxed, shaped_reward
from agentenvs.envs.retool.sandboxes import shared_sandbox
from agentenvs.envs.text import Message, TextEnv, TextStep
from agentenvs.envs.tool_calls import ParseStatus, ToolCallAttempt, ToolOutcome, step_logs
from agentenvs.envs.tool_calls.sniff import foreign_attempts
from agentenvs.envs.types import Metrics, SamplerStopReason, StopReason
from agentenvs.sandbox.base import ExecResult, ExecStatus, Session

if TYPE_CHECKING:
    from agentenvs.envs.retool.config import ReToolConfig

COMPLETED = str(StopReason.COMPLETED)
NO_ANSWER = "no_answer"
EMPTY_CODE = "empty_code"
MAX_TURNS = str(StopReason.MAX_TURNS)
MAX_TOOL_CALLS = str(StopReason.MAX_TOOL_CALLS)

HOSTILE_SNIPPETS = (
    "while True:\n    pass",
    "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "print(open('/etc/shadow').read())",
    "print('A' * 1_000_000)",
)


class SandboxFailure(TransientError, RuntimeError):
    """The sandbox could not execute anything (a dead worker or server), after retries.

    Transient: the collector retries the group on a fresh attempt, unlike an error in
    the env's own code."""


class ReToolEnv(TextEnv):
    def __init__(
        self, problem: Problem, config: ReToolConfig, tokenizer: TokenCounter | None = None
    ) -> None:
        self.problem = problem
        self.config = config
        self.tokenizer = tokenizer
        self.output_policy = config.output_policy()
        self.max_turns = config.limits.max_turns
        self.turns = 0
        self.tool_calls = 0
        self.tool_turns = 0
        """Turns answered with tool messages (verl's user turns, which its shaping counts)."""
        self._unshown = 0
        """Interpreter outputs of the last step in ``_transcript``: never shown if a limit
        ended the episode right after that step."""
        self.malformed_actions = 0
        self.exec_counts: dict[str, int] = {}
        self.output_truncations = 0
        self.sandbox_seconds = 0.0
        self.last_output: str | None = None
        self.correct: bool | None = None
        self.predicted: str | None = None
        self.stop_reason: str | None = None
        self._texts: list[str] = []
        self._transcript: list[str] = []
        """Actions and interpreter outputs in order: the whole response verl grades."""
        self._session: Session | None = None
        self._attempts: list[ToolCallAttempt] = []
        """This step's tool-call attempts, with outcomes as they are known."""

    async def fork(self) -> ReToolEnv:
        """A copy of the episode's counters and transcript; with ``execution=stateful``
        the interpreter session is forked too (each backend's ``Session.fork``), so the
        copy's variables are its own. Stateless execution keeps no state to fork."""
        shared = (self.problem, self.config, self.tokenizer, self.output_policy, self._session)
        clone = copy_task_state(self, shared=shared)
        if self._session is not None:
            clone._session = await self._session.fork()
        return clone

    # ---- prompt ---------------------------------------------------------------------
    def initial_messages(self) -> list[Message]:
        cfg = self.config
        system = cfg.system_prompt
        if system is None:
            system = prompts.system_prompt(cfg.protocol, cfg.execution)
        messages: list[Message] = [{"role": "system", "content": system}] if system else []
        user = prompts.user_prompt(self.problem.question, cfg.prompt_template)
        messages.append({"role": "user", "content": user})
        return messages

    def stop_sequences(self) -> list[str]:
        return ["</code>"] if self.config.protocol == "retool" else []

    def tools(self) -> list[dict[str, Any]] | None:
        if self.config.protocol == "retool":
            return None
        return [
            tool_spec(self.config.text("tool_description"), self.config.text("code_description"))
        ]

    # ---- one action -----------------------------------------------------------------
    async def step(self, action_text: str, *, stop_reason: SamplerStopReason) -> TextStep:
        """One action; its tool-call attempts go to the step's logs (``tool_calls``)."""
        self._attempts = []
        result = await self._step(action_text, stop_reason)
        declared = [FORMATS[self.config.protocol]]
        attempts = self._attempts + foreign_attempts(action_text, declared)
        result.logs = {
            **result.logs,
            **step_logs(attempts, declared, _RESULT_OPEN[self.config.protocol]),
        }
        return result

    def _mark(self, index: int, **change: Any) -> None:
        """Record what became of attempt ``index`` (a status or an outcome)."""
        attempt = self._attempts[index]
        if "status" in change:
            attempt = attempt.with_status(change["status"], change.get("detail", ""))
        if "outcome" in change:
            attempt = attempt.with_outcome(change["outcome"])
        self._attempts[index] = attempt

    async def _step(self, action_text: str, stop_reason: SamplerStopReason) -> TextStep:
        cfg = self.config
        self.turns += 1
        self._texts.append(action_text)
        self._transcript.append(action_text)
        self._unshown = 0
        last_turn = self.turns >= self.max_turns
        if cfg.protocol == "tool_call" and cfg.call_rules == "verl":
            parsed = parse_tool_calls_verl(action_text)
        else:
            parsed = parse_action(action_text, cfg.protocol)
        self._attempts = list(parsed.attempts)
        if parsed.kind == "code" and self._ended_before_running(action_text, stop_reason):
            parsed = dataclasses.replace(parsed, kind="final", codes=[])

        if parsed.kind == "final":
            if not self.answered and cfg.on_no_answer == "continue":
                if last_turn:
                    return self._finish(MAX_TURNS)
                return TextStep(self._nudge())
            return self._finish(COMPLETED if self.answered else NO_ANSWER)

        if parsed.kind == "malformed":
            self.malformed_actions += 1
            if cfg.on_malformed == "end":
                return self._finish(parsed.problem, penalty=cfg.malformed_penalty)
            if last_turn:
                return self._finish(MAX_TURNS, penalty=cfg.malformed_penalty)
            feedback = prompts.malformed_feedback(parsed.detail, cfg.protocol)
            return TextStep(
                self._tool_reply([feedback]),
                reward=cfg.malformed_penalty,
                logs={"malformed": parsed.detail},
            )

        codes = parsed.codes[: cfg.max_parallel_calls]  # None keeps them all
        errors = (parsed.errors or [None] * len(parsed.codes))[: cfg.max_parallel_calls]
        calls = parsed.call_index[: len(codes)]
        over = f"more than {cfg.max_parallel_calls} parallel call(s)"
        for index in parsed.call_index[len(codes) :]:
            self._mark(index, status=ParseStatus.TOO_MANY_CALLS, detail=over)
        runnable = sum(1 for error in errors if error is None)
        if self.tool_calls + runnable > cfg.max_tool_calls:
            over = f"more than {cfg.max_tool_calls} tool call(s) in the episode"
            for index, error in zip(calls, errors, strict=True):
                if error is None:
                    self._mark(index, status=ParseStatus.TOO_MANY_CALLS, detail=over)
            if cfg.on_max_tool_calls == "end":
                return self._finish(MAX_TOOL_CALLS)
            if last_turn:
                return self._finish(MAX_TURNS)
            return TextStep(self._tool_reply([cfg.text("max_calls_note")]))
        if last_turn:  # no turn left to read the output: do not run it
            return self._finish(MAX_TURNS)

        outputs, statuses = [], []
        for index, code, error in zip(calls, codes, errors, strict=True):
            if error is not None:  # verl answers a call it cannot run and goes on
                outputs.append(cfg.text("tool_error").replace("{error}", error))
                statuses.append("call_error")
                continue
            text, status = await self._run(code)
            self._mark(index, outcome=_OUTCOMES.get(status, ToolOutcome.ERROR))
            outputs.append(text)
            statuses.append(status)
        self._transcript.extend(outputs)
        self._unshown = len(outputs)
        self.tool_turns += 1
        return TextStep(self._tool_reply(outputs), logs={"exec_status": ",".join(statuses)})

    def _ended_before_running(self, action_text: str, stop_reason: SamplerStopReason) -> bool:
        """A ``retool`` turn the model closed with end-of-turn, its code never stopped on.

        Generation stops on ``</code>``, so a turn that ended otherwise went past its
        code: with ``code_at_eos=final`` it is the answer turn (a text that ends on
        ``</code>`` was stopped there, whatever the sampler reported, and runs).
        """
        return (
            self.config.protocol == "retool"
            and self.config.code_at_eos == "final"
            and stop_reason == "eos"
            and not action_text.rstrip().endswith(CODE_CLOSE)
        )

    @property
    def model_text(self) -> str:
        """Everything the model wrote this episode (never the interpreter's output)."""
        return "".join(self._texts)

    @property
    def answer_text(self) -> str:
        """The model's text outside its code blocks: where its answer can be."""
        return prose_text(self.model_text, self.config.protocol)

    @property
    def answered(self) -> bool:
        return last_boxed(self.answer_text) is not None

    def graded_text(self) -> str:
        """What the grader reads (``grader_scope``)."""
        if self.config.grader_scope == "whole_response":
            return "".join(self._transcript)
        return self.answer_text

    def _tool_reply(self, outputs: list[str]) -> str | list[Message]:
        if self.config.protocol == "retool":
            return "".join(interpreter_block(out) for out in outputs)
        return [tool_message(out) for out in outputs]

    def _nudge(self) -> str | Message:
        if self.config.protocol == "retool":
            return f"\n\n{self.config.text('no_answer_nudge')}\n\n"
        return {"role": "user", "content": self.config.text("no_answer_nudge")}

    # ---- execution ------------------------------------------------------------------
    async def _run(self, code: str) -> tuple[str, str]:
        cfg = self.config
        if cfg.print_last_line:
            code = print_last_line(code)
        started = time.perf_counter()
        try:
            result = await self._execute(code)
        finally:
            self.sandbox_seconds += time.perf_counter() - started
        self.tool_calls += 1
        status = str(result.status)
        self.exec_counts[status] = self.exec_counts.get(status, 0) + 1
        text = render_result(result, self.output_policy, cfg.timeout)
        text, cut = truncate(text, self.output_policy, self.tokenizer)
        self.output_truncations += int(cut)
        self.last_output = text
        return text, status

    async def _execute(self, code: str) -> ExecResult:
        cfg = self.config
        sandbox = await shared_sandbox(cfg.sandbox)
        if cfg.execution == "stateful":
            if self._session is None:
                self._session = sandbox.session()
            result = await self._guarded(self._session.run(code, timeout=cfg.timeout))
            if result.status == ExecStatus.SANDBOX_ERROR:
                raise SandboxFailure(f"the sandbox session failed: {result.message}")
            return result
        attempts = 1 + cfg.sandbox_retries
        for _ in range(attempts):
            result = await self._guarded(
                sandbox.run(code, timeout=cfg.timeout, memory_limit_mb=cfg.memory_limit_mb)
            )
            if result.status != ExecStatus.SANDBOX_ERROR:
                return result
        raise SandboxFailure(
            f"the sandbox failed {attempts} time(s) in a row: {result.message or 'no details'}"
        )

    @staticmethod
    async def _guarded(call: Any) -> ExecResult:
        try:
            return await call
        except Exception as err:  # the contract says results, not exceptions
            return ExecResult(ExecStatus.SANDBOX_ERROR, message=f"{type(err).__name__}: {err}")

    # ---- the end --------------------------------------------------------------------
    def _finish(self, reason: str, *, penalty: float = 0.0) -> TextStep:
        cfg = self.config
        graded = grade(self.graded_text(), self.problem.answer, cfg.grader)
        self.correct, self.predicted, self.stop_reason = graded.correct, graded.predicted, reason
        reward = shaped_reward(
            graded.correct,
            correct_reward=cfg.correct_reward,
            incorrect_reward=cfg.incorrect_reward,
            tool_calls=self.tool_turns if cfg.call_rules == "verl" else self.tool_calls,
            shaping=cfg.tool_shaping,
            per_call=cfg.tool_shaping_per_call,
            cap=cfg.tool_shaping_cap,
        )
        if not self.answered:
            reward += cfg.no_answer_penalty
        return TextStep(
            reward=reward + penalty,
            done=True,
            stop_reason=reason,
            metrics=self.episode_metrics(),
            logs={"predicted": graded.predicted or "", "answer": self.problem.answer},
        )

    def on_limit(self, reason: str) -> TextStep | None:
        """A shared limit ended the episode: it ends like an unanswered one, and the
        final step still carries this episode's metrics (tool calls, sandbox time).
        The wrong-answer reward comes from the limits (see ReToolConfig); the response
        budget (``limits.max_response_tokens``) is the exception: verl grades what the
        response holds when it runs out, so that ending is graded."""
        if self.stop_reason is not None:
            return None
        if reason == StopReason.RESPONSE_BUDGET:
            # verl grades the response its budget left, like any other: the outputs of
            # the last step were never shown, so they are not part of it.
            if self._unshown:
                del self._transcript[-self._unshown :]
                self.tool_turns -= 1
                self._unshown = 0
            return self._finish(reason)
        self.stop_reason = reason
        return TextStep(metrics=self.episode_metrics())

    def episode_metrics(self) -> Metrics:
        metrics: Metrics = {
            "correct": int(bool(self.correct)),
            "answered": int(self.answered),
            "tool_calls": self.tool_calls,
            "used_tool": int(self.tool_calls > 0),
            "malformed_actions": self.malformed_actions,
            "output_truncations": self.output_truncations,
            "sandbox_seconds": round(self.sandbox_seconds, 6),
        }
        for status, count in self.exec_counts.items():
            metrics[f"exec/{status}"] = count
        return metrics

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            with contextlib.suppress(Exception):  # must not mask the episode's outcome
                await session.close()

    # ---- scripted policies ----------------------------------------------------------
    def scripted_action(self, variant: str = "oracle") -> str | None:
        """``oracle`` runs the problem's solution program and boxes what it printed;
        ``wrong`` runs it and boxes something else; ``hostile`` runs escape attempts
        (an endless loop, a fork bomb, reading /etc/shadow, an output flood) and then
        answers; ``malformed`` writes an empty block, a broken call and no answer."""
        protocol = self.config.protocol
        if variant in ("oracle", "wrong"):
            if self.last_output is None:
                code = self.problem.solution or f"print({self.problem.answer!r})"
                return code_action(code, "Let me compute this exactly.\n", protocol)
            value = _last_line(self.last_output)
            if variant == "wrong":
                value = wrong_answer(self.problem.answer)
            return self._answer_text(value)
        if variant == "hostile":
            if (
                self.tool_calls < len(HOSTILE_SNIPPETS)
                and self.tool_calls < self.config.max_tool_calls
            ):
                return code_action(HOSTILE_SNIPPETS[self.tool_calls], "", protocol)
            return self._answer_text(wrong_answer(self.problem.answer))
        if variant == "malformed":
            script = _MALFORMED[protocol]
            return script[min(self.turns, len(script) - 1)]
        return None

    def _answer_text(self, value: str) -> str:
        if self.config.protocol == "retool":
            return f"The interpreter printed {value}.\n<answer>\\boxed{{{value}}}</answer>"
        return f"The code printed {value}, so the answer is \\boxed{{{value}}}."


_OUTCOMES = {str(ExecStatus.OK): ToolOutcome.OK, str(ExecStatus.TIMEOUT): ToolOutcome.TIMEOUT}
"""A sandbox status as a tool outcome; every other status (an exception, the memory or
output limit) is an ``error``."""

_RESULT_OPEN = {"retool": "<interpreter>", "tool_call": "<tool_response>"}
"""What opens a tool result in each protocol (the Qwen templates wrap tool messages in
``<tool_response>``): sampled text holding it is a result the loss would train on."""

_MALFORMED = {
    "retool": (
        "<code>\n```python\n```\n</code>",
        "Now the real code.\n```python\nprint(1)\n```\n</code>",
        "I am not sure what the answer is.",
    ),
    "tool_call": (
        '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": ""}}\n</tool_call>',
        "<tool_call>\n{this is not json}\n</tool_call>",
        "I am not sure what the answer is.",
    ),
}


def wrong_answer(answer: str) -> str:
    """A value that is certainly not ``answer``."""
    try:
        return str(int(answer) + 1)
    except ValueError:
        return "0" if answer.strip() != "0" else "1"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
