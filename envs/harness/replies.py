"""From the tokens a policy sampled to the reply an API returns.

The sampled tokens are decoded once, never re-encoded: the end-of-turn marker the model
emitted is cut off (:meth:`Renderer.split_action`), a ``<think>`` block becomes the
reply's reasoning, and tool calls are read from the text *of the sampled tokens* with
the parser of the template's format (``envs/tool_calls``). A call that parses into a
name and arguments is returned as a call, in each API's shape, even when it names an
unknown tool or misses an argument: the client answers that with an error the model
sees, as it would from any server. Text that does not parse into a call (cut short,
broken markup) stays text, so nothing the model wrote is lost.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentenvs.envs.harness.conversation import ChatRequest, FinishReason, Reply, ToolCall
from agentenvs.envs.renderers import Renderer
from agentenvs.envs.tool_calls import CallFormat, ParseStatus, ToolCallAttempt, parse, tools_of
from agentenvs.envs.types import SamplerStopReason

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

RETURNED = frozenset(
    {
        ParseStatus.OK,
        ParseStatus.UNKNOWN_TOOL,
        ParseStatus.MISSING_ARGUMENT,
        ParseStatus.INVALID_ARGUMENT,
        ParseStatus.TOO_MANY_CALLS,
    }
)
"""Attempts returned as calls: readable into a name and arguments."""

TEMPLATE_MARKERS: tuple[tuple[str, CallFormat], ...] = (
    ("<function=", CallFormat.QWEN3_CODER),
    ("<arg_key>", CallFormat.GLM45),
    ("tool▁call▁begin", CallFormat.DEEPSEEK),
    ("<tool_call>", CallFormat.HERMES),
)
"""Text a chat template writes for its calls, most specific first: how the format of a
template is told when none is given."""


def sniff_format(chat_template: str | None) -> CallFormat | None:
    """The tool-call format a chat template writes, or None (a template without tools)."""
    for marker, fmt in TEMPLATE_MARKERS:
        if chat_template and marker in chat_template:
            return fmt
    return None


class CallIds:
    """Unique tool-call and answer ids for one session, e.g. ``call_3f2a1c0004``.

    Clients key their tool results by these ids, so they must not repeat within a
    session; a short digest of the session key keeps two sessions' ids apart."""

    def __init__(self, session: str) -> None:
        self._stem = hashlib.sha256(session.encode()).hexdigest()[:6]
        self._counter = itertools.count()

    def next(self, prefix: str) -> str:
        return f"{prefix}_{self._stem}{next(self._counter):04d}"


@dataclass
class ReadReply:
    """A reply and what reading it found."""

    content: str
    reasoning: str
    calls: list[tuple[str, dict]]
    attempts: list[ToolCallAttempt] = field(default_factory=list)
    finish: FinishReason = "stop"
    stop_sequence: str | None = None


@dataclass(frozen=True)
class ReplyReader:
    """Reads sampled tokens for one tokenizer and tool-call format."""

    renderer: Renderer
    tool_format: CallFormat | None

    def raw_text(self, tokens: Sequence[int]) -> tuple[str, str]:
        """The decoded completion without its end-of-turn marker, and the marker."""
        return self.renderer.split_action(list(tokens))

    def read(
        self, tokens: Sequence[int], stop_reason: SamplerStopReason, request: ChatRequest
    ) -> ReadReply:
        text, marker = self.raw_text(tokens)
        stop_sequence = None
        if not marker and stop_reason == "stop":
            stop_sequence = next((s for s in request.stop if s and text.endswith(s)), None)
            if stop_sequence:
                text = text[: -len(stop_sequence)]
        reasoning = ""
        if THINK_CLOSE in text:
            thought, text = text.split(THINK_CLOSE, 1)
            reasoning = thought.split(THINK_OPEN, 1)[-1].strip("\n")
            text = text.lstrip("\n")
        attempts: list[ToolCallAttempt] = []
        calls: list[tuple[str, dict]] = []
        if self.tool_format is not None and request.tools:
            tools = tools_of(request.tools)
            attempts = parse(text, self.tool_format, tools=tools)
            kept = [
                a for a in attempts if a.status in RETURNED and a.name and a.arguments is not None
            ]
            for attempt in reversed(kept):  # cut from the end so earlier spans stay put
                start, end = attempt.span
                text = text[:start] + text[end:]
            calls = [(a.name, dict(a.arguments or {})) for a in kept]  # type: ignore[misc]
        finish: FinishReason = (
            "tool_calls" if calls else ("length" if stop_reason == "length" else "stop")
        )
        return ReadReply(text.strip(), reasoning, calls, attempts, finish, stop_sequence)


def make_reply(
    read: ReadReply, ids: CallIds, *, answer_id: str, call_prefix: str, prompt_tokens: int,
    completion_tokens: int, created: int, model: str,
) -> Reply:  # fmt: skip
    """The :class:`Reply` of a read completion, its calls given ids with ``call_prefix``."""
    calls = [ToolCall(ids.next(call_prefix), name, args) for name, args in read.calls]
    return Reply(
        content=read.content,
        reasoning=read.reasoning,
        tool_calls=calls,
        finish=read.finish,
        stop_sequence=read.stop_sequence,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        id=answer_id,
        created=created,
        model=model,
    )
