"""One tool-call attempt as data: where it is, how it was read, what came of it.

A run whose tool calls never parse looks healthy from its rewards alone (the model
answers without the tool, or every turn ends "final"). Recording each attempt with a
classified parse status and the tool's outcome lets ``agentenvs check`` tell such a run
from a good one. Parsers (one module per wire format in this package) return these;
environments fill in the outcome once the tool ran and store them in the step's logs
(:mod:`agentenvs.envs.tool_calls.record`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentenvs.envs.tool_calls.schema import Tools


class CallFormat(StrEnum):
    """The wire format a call was read in (what the chat template or prompt declares)."""

    HERMES = "hermes"
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes, Qwen2.5/3)."""
    QWEN3_CODER = "qwen3_coder"
    """``<tool_call><function=name><parameter=x>v</parameter></function></tool_call>``."""
    DEEPSEEK = "deepseek"
    """DeepSeek V3/R1: ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>name`` + fenced JSON."""
    GLM45 = "glm45"
    """GLM-4.5: ``<tool_call>name\\n<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>``."""
    SEARCH_R1 = "search_r1"
    """Search-R1's ``<search>query</search>`` (``<answer>`` ends the episode: no call)."""
    RETOOL_CODE = "retool_code"
    """ReTool's ``<code>```python ...```</code>`` (the code interpreter is the one tool)."""
    ALFWORLD_ACTION = "alfworld_action"
    """ALFWorld's ``<action>go to fridge 1</action>`` (one game command per turn)."""


class ParseStatus(StrEnum):
    """How reading one attempt went. Only ``ok`` means the call could be run as written."""

    OK = "ok"
    MALFORMED_JSON = "malformed_json"
    """The call's JSON (body, arguments, or a JSON-typed value) cannot be read, or it is
    not the shape the format needs (an object with a string ``name``)."""
    MALFORMED_MARKUP = "malformed_markup"
    """The tags are wrong: a closing tag without its opening one, a missing name."""
    UNKNOWN_TOOL = "unknown_tool"
    MISSING_ARGUMENT = "missing_argument"
    """A required argument is absent."""
    INVALID_ARGUMENT = "invalid_argument"
    """An argument has the wrong type or is empty where content is needed."""
    TOO_MANY_CALLS = "too_many_calls"
    """Readable, but past the number of calls allowed (per turn or per episode)."""
    TRUNCATED = "truncated"
    """Opened and never closed: the text ended inside the call."""


PARSE_FAILURES = frozenset(ParseStatus) - {ParseStatus.OK}


class ToolOutcome(StrEnum):
    """What happened when the environment ran (or did not run) the call."""

    OK = "ok"
    ERROR = "error"
    """The tool ran and failed (an exception, a non-zero exit, an invalid game command)."""
    TIMEOUT = "timeout"
    NOT_RUN = "not_run"
    """Never run: it did not parse, was over a limit, or the episode ended first."""


@dataclass(frozen=True)
class ToolCallAttempt:
    """One attempt at a tool call inside one action.

    ``span`` is the character range of the call in the decoded action text (start, end;
    end exclusive), so a viewer can highlight it; ``tokens`` is the range of the action's
    token indices (end exclusive) that holds it: text environments parse text and leave
    it None, and :class:`~agentenvs.envs.rendered_env.RenderedEnv` fills it from the
    sampled tokens (``record.with_token_spans``). ``arguments`` holds what was read (for the environment to run); it is not stored in records (it
    is already in the action's tokens): :meth:`to_json` keeps only its keys.
    """

    format: CallFormat
    status: ParseStatus
    span: tuple[int, int]
    name: str | None = None
    arguments: dict[str, Any] | None = field(default=None, compare=False)
    detail: str = ""
    """Why the status is not ``ok`` (or, for an outcome, what the tool said), short."""
    outcome: ToolOutcome = ToolOutcome.NOT_RUN
    tokens: tuple[int, int] | None = None

    @property
    def parsed(self) -> bool:
        return self.status == ParseStatus.OK

    @property
    def succeeded(self) -> bool:
        """Parsed and ran without error: the call did what a tool call is for."""
        return self.status == ParseStatus.OK and self.outcome == ToolOutcome.OK

    def with_status(self, status: ParseStatus, detail: str = "") -> ToolCallAttempt:
        return replace(self, status=status, detail=detail)

    def with_outcome(self, outcome: ToolOutcome, detail: str | None = None) -> ToolCallAttempt:
        return replace(self, outcome=outcome, detail=self.detail if detail is None else detail)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": str(self.format),
            "status": str(self.status),
            "span": list(self.span),
            "outcome": str(self.outcome),
        }
        if self.name is not None:
            data["name"] = self.name
        if self.arguments is not None:
            data["argument_keys"] = sorted(self.arguments)
        if self.detail:
            data["detail"] = self.detail[:DETAIL_CHARS]
        if self.tokens is not None:
            data["tokens"] = list(self.tokens)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolCallAttempt:
        """The stored form read back; an unknown format or status raises ``ValueError``
        (a record from a newer writer should not be judged by old names)."""
        tokens = data.get("tokens")
        keys = data.get("argument_keys")
        return cls(
            format=CallFormat(data["format"]),
            status=ParseStatus(data["status"]),
            span=(int(data["span"][0]), int(data["span"][1])),
            name=data.get("name"),
            arguments=None if keys is None else dict.fromkeys(keys),
            detail=str(data.get("detail", "")),
            outcome=ToolOutcome(data.get("outcome", ToolOutcome.NOT_RUN)),
            tokens=None if tokens is None else (int(tokens[0]), int(tokens[1])),
        )


DETAIL_CHARS = 200
"""A stored detail is cut here: it says what went wrong, the action holds the rest."""


class Parse(Protocol):
    """What every format module's ``parse`` is: each attempt of ``text`` in order,
    judged against ``tools``, readable calls past ``max_calls`` marked; never raises."""

    def __call__(
        self,
        text: str,
        *,
        tools: Tools | None = None,
        max_calls: int | None = None,
        stopped_on_sequence: bool = False,
    ) -> list[ToolCallAttempt]: ...
