"""The three wire formats the gateway speaks, one module each.

* ``openai_chat``: OpenAI Chat Completions (``POST /v1/chat/completions``);
* ``openai_responses``: OpenAI Responses (``POST /v1/responses``);
* ``anthropic_messages``: Anthropic Messages (``POST /v1/messages``, ``/count_tokens``).

Each reads a request body into a :class:`~agentenvs.envs.harness.conversation.ChatRequest`
and writes a :class:`~agentenvs.envs.harness.conversation.Reply` back as a JSON body or
as the API's server-sent events. Shapes and event sequences follow the official SDKs'
types (``openai``, ``anthropic`` on PyPI); the tests parse every answer with them.

A stream opens before sampling starts (the answer's id is known by then) and sends the
API's keep-alive while the policy samples, so a harness with a first-byte timeout does
not give up on a slow model; the rest follows once the tokens are read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from agentenvs.envs.harness.conversation import ChatRequest, Reply, RequestError, function_tool


def sse(data: Any, event: str | None = None) -> str:
    """One server-sent event (``event:`` line when named, one ``data:`` line)."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n"


class ApiStream(Protocol):
    """One streamed answer's frames."""

    def opening(self) -> list[str]: ...

    def keepalive(self) -> str: ...

    def closing(self, reply: Reply) -> list[str]: ...

    def failure(self, status: int, message: str) -> list[str]: ...


class Api(Protocol):
    """One wire format: read a request, write an answer, an error, or a stream."""

    name: str

    def parse(self, body: Any) -> ChatRequest: ...

    def response(self, reply: Reply, request: ChatRequest) -> dict[str, Any]: ...

    def stream(self, request: ChatRequest, answer_id: str, prompt_tokens: int) -> ApiStream: ...

    def error(self, status: int, message: str) -> dict[str, Any]: ...


def require_dict(body: Any, what: str = "the request body") -> dict[str, Any]:
    if not isinstance(body, dict):
        raise RequestError(f"{what} must be a JSON object")
    return body


def positive_int(value: Any, name: str) -> int | None:
    """An optional positive integer field (``max_tokens``), refused when it is not one."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestError(f"{name} must be a positive integer, got {value!r}")
    return value


def string_list(value: Any, name: str) -> list[str]:
    """A stop field: one string or a list of strings."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise RequestError(f"{name} must be a string or a list of strings")


ToolSpec = tuple[Any, Any, Any]
"""A tool's name, description and JSON-schema parameters, as an API spells them."""


def read_tools(
    raw: Any, spec_of: Callable[[dict[str, Any]], ToolSpec | None], accepted: str
) -> list[dict[str, Any]]:
    """An API's tool list in the function shape templates list; ``spec_of`` reads one
    tool (None for a kind the gateway cannot offer the model, refused as ``accepted``)."""
    tools = []
    for index, item in enumerate(raw or []):
        tool = require_dict(item, f"tools[{index}]")
        spec = spec_of(tool)
        if spec is None:
            raise RequestError(
                f"tools[{index}]: only {accepted} are supported, got type {tool.get('type')!r}"
            )
        tools.append(function_tool(*spec))
    return tools


def openai_error(status: int, message: str) -> dict[str, Any]:
    """The error object both OpenAI APIs answer with (``context_length_exceeded`` for a
    prompt over the gateway's context limit)."""
    kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    code = "context_length_exceeded" if message.startswith("prompt is too long") else None
    return {"message": message, "type": kind, "param": None, "code": code}
