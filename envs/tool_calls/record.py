"""How a step's tool-call attempts reach the stored record, and how they are read back.

The collector copies a step's ``logs`` into its transition and the store writes them
as they are (``rollout/collect/turns.py``, ``records.py``), so the attempts travel
there under one key, ``tool_calls``, as a JSON string (logs hold flat values only):

    {"declared": ["hermes"], "result_open": "<tool_response>",
     "attempts": [{"format": "hermes", "status": "ok", "span": [12, 80], "tokens": [3, 21],
                   "name": "code_interpreter", "argument_keys": ["code"],
                   "outcome": "ok"}]}

``declared`` is the set of formats the environment's template or prompt told the model
to use; ``result_open`` is the text that opens a tool result in its protocol, so
``agentenvs check`` can tell a tool result that landed inside sampled (trained-on)
tokens. A step without the key had no tool protocol; one with an empty ``attempts``
list is a turn where the model made no attempt.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agentenvs.envs.tool_calls.types import CallFormat, ToolCallAttempt

TOOL_CALLS_LOG = "tool_calls"


@dataclass
class ToolCallLog:
    """What one step says about tool calls."""

    declared: tuple[CallFormat, ...]
    attempts: list[ToolCallAttempt] = field(default_factory=list)
    result_open: str | None = None

    def to_logs(self) -> dict[str, str]:
        payload: dict[str, Any] = {
            "declared": [str(f) for f in self.declared],
            "attempts": [a.to_json() for a in self.attempts],
        }
        if self.result_open is not None:
            payload["result_open"] = self.result_open
        return {TOOL_CALLS_LOG: json.dumps(payload, ensure_ascii=False)}

    @classmethod
    def from_logs(cls, logs: Mapping[str, Any]) -> ToolCallLog | None:
        """The step's log, or None for a step without one; a corrupt entry raises
        ``ValueError`` naming what is wrong."""
        raw = logs.get(TOOL_CALLS_LOG)
        if raw is None:
            return None
        try:
            data = json.loads(raw) if isinstance(raw, str) else raw
            return cls(
                declared=tuple(CallFormat(f) for f in data.get("declared", [])),
                attempts=[ToolCallAttempt.from_json(a) for a in data.get("attempts", [])],
                result_open=data.get("result_open"),
            )
        except (TypeError, KeyError, ValueError, AttributeError, IndexError) as err:
            raise ValueError(f"unreadable {TOOL_CALLS_LOG!r} log: {err}") from None


def step_logs(
    attempts: Sequence[ToolCallAttempt],
    declared: Iterable[CallFormat],
    result_open: str | None = None,
) -> dict[str, str]:
    """The logs entry for a step's attempts (merge it into ``StepResult.logs``)."""
    return ToolCallLog(tuple(declared), list(attempts), result_open).to_logs()


def episode_attempts(transitions: Iterable[Any]) -> tuple[list[ToolCallAttempt], bool]:
    """All attempts of one trajectory's transitions, and whether any step had a log
    (a tool environment at all)."""
    attempts: list[ToolCallAttempt] = []
    seen = False
    for transition in transitions:
        log = ToolCallLog.from_logs(transition.logs)
        if log is not None:
            seen = True
            attempts.extend(log.attempts)
    return attempts, seen


def _tokens_covering(prefix_text: Callable[[int], str], n_tokens: int, chars: int) -> int:
    """The fewest leading tokens whose decoded text holds ``chars`` characters (binary
    search: a prefix's decoded length grows with the prefix)."""
    low, high = 0, n_tokens
    while low < high:
        middle = (low + high) // 2
        if len(prefix_text(middle)) >= chars:
            high = middle
        else:
            low = middle + 1
    return low


def with_token_spans(logs: Mapping[str, Any], action: Sequence[int], decode: Any) -> dict[str, Any]:
    """``logs`` with each tool-call attempt's ``tokens`` filled: the range of the action's
    token indices (end exclusive) whose text holds the attempt's character ``span``.

    Text environments parse the decoded action, so only the token layer can say which
    sampled tokens make up a call; a viewer or a per-call loss needs that range. The cost
    is a few prefix decodes per attempt, and only on steps that recorded attempts.
    """
    log = ToolCallLog.from_logs(logs) if TOOL_CALLS_LOG in logs else None
    if log is None or not log.attempts:
        return dict(logs)
    tokens = list(action)
    cache: dict[int, str] = {}

    def prefix_text(k: int) -> str:
        if k not in cache:
            cache[k] = decode(tokens[:k])
        return cache[k]

    located = []
    for attempt in log.attempts:
        start, end = attempt.span
        first = max(_tokens_covering(prefix_text, len(tokens), start + 1) - 1, 0)
        last = _tokens_covering(prefix_text, len(tokens), end)
        located.append(replace(attempt, tokens=(first, max(last, first))))
    return {**logs, **ToolCallLog(log.declared, located, log.result_open).to_logs()}
