"""The one conversation every API is read into, and the one reply each is written from.

The three wire formats (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages:
``envs/harness/apis/``) describe the same thing in three shapes: a list of chat messages,
the tools the model may call, a token cap and stop strings in; text, reasoning and tool
calls out. Reading every request into :class:`ChatRequest` and writing every answer
from :class:`Reply` keeps the token path (rendering, sampling, parsing) one path, and
keeps what the client sent comparable across turns (:func:`message_key`), which is how
a request is recognised as the continuation of an earlier one.

Messages are kept in the shape chat templates read (Hugging Face's): ``role``,
``content`` as a string, assistant ``tool_calls`` as ``{"id", "type": "function",
"function": {"name", "arguments"}}`` with the arguments as a JSON object (a template
writes them with its own ``tojson``), tool results as ``role: "tool"`` with
``tool_call_id``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from agentenvs.envs.errors import AgentEnvsError

Message = dict[str, Any]
FinishReason = Literal["stop", "length", "tool_calls"]


class RequestError(AgentEnvsError, ValueError):
    """A request the gateway cannot serve as sent: answered with status 400 (or the one
    given) in the API's own error shape, and nothing is sampled."""

    status = 400


@dataclass(frozen=True)
class ToolCall:
    """One call the model made, as every API returns it (each with its own id prefix)."""

    id: str
    name: str
    arguments: dict[str, Any]

    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass
class ChatRequest:
    """What one API request asks for, in the template's terms."""

    messages: list[Message]
    api: str = "chat"
    """Which API asked (``chat``, ``responses``, ``messages``): recorded with the turn."""
    call_prefix: str = "call"
    """How this API's tool-call ids start (``call``, ``toolu``)."""
    answer_prefix: str = "chatcmpl"
    """How this API's answer ids start (``chatcmpl``, ``resp``, ``msg``)."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI function tools: ``{"type": "function", "function": {"name", "description",
    "parameters"}}`` (the shape chat templates list)."""
    model: str = ""
    stream: bool = False
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    include_usage: bool = False
    """Chat Completions' ``stream_options.include_usage``: a last chunk with the usage."""
    echo: dict[str, Any] = field(default_factory=dict)
    """Request fields an API repeats in its answer (the Responses API's tools, instructions)."""


@dataclass
class Reply:
    """What the model answered, read from the tokens it sampled."""

    content: str
    """Visible text: the completion without its end-of-turn marker, reasoning block and
    parsed tool calls."""
    reasoning: str
    tool_calls: list[ToolCall]
    finish: FinishReason
    stop_sequence: str | None
    """The request's stop string the completion ended on (Anthropic reports it)."""
    prompt_tokens: int
    completion_tokens: int
    id: str
    """The answer's id (each API prefixes its own)."""
    created: int
    model: str


def text_of(content: Any, *, what: str) -> str:
    """A message content as one string: a string as it is, a list of text parts joined.

    Parts that are not text (images, audio, files) cannot be rendered into the token
    context of a text model, so they are refused rather than dropped unseen."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError(f"{what}: content must be a string or a list of parts")
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, dict):
            raise RequestError(f"{what}: a content part must be an object")
        kind = part.get("type", "text")
        if kind in ("text", "input_text", "output_text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            raise RequestError(f"{what}: content parts of type {kind!r} are not supported")
    return "".join(texts)


def parse_arguments(raw: Any) -> dict[str, Any] | str:
    """Tool-call arguments as an object; JSON text that is not an object stays text (the
    template then writes it as it came)."""
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    if not isinstance(raw, str):
        raise RequestError("tool call arguments must be a JSON string or an object")
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        return raw
    return value if isinstance(value, dict) else raw


def call_message(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """An assistant tool call in the template's shape."""
    if not isinstance(name, str) or not name:
        raise RequestError("a tool call needs a name")
    return {
        "id": str(call_id),
        "type": "function",
        "function": {"name": name, "arguments": parse_arguments(arguments)},
    }


def function_tool(name: Any, description: Any, parameters: Any) -> dict[str, Any]:
    """A tool in the OpenAI function shape chat templates list."""
    if not isinstance(name, str) or not name:
        raise RequestError("every tool needs a name")
    function: dict[str, Any] = {"name": name}
    if isinstance(description, str):
        function["description"] = description
    function["parameters"] = parameters if isinstance(parameters, dict) else {"type": "object"}
    return {"type": "function", "function": function}


def message_key(message: Message) -> str:
    """What makes two messages the same turn of a conversation, as JSON text.

    An assistant message is its visible text (stripped) and its calls' names and
    arguments: clients drop or reshape reasoning, ids and whitespace when they send a
    reply back, and none of that changes which reply it was. Every other message is
    compared whole."""
    if message.get("role") == "assistant":
        calls = [
            [c["function"]["name"], c["function"]["arguments"]]
            for c in message.get("tool_calls") or []
        ]
        shown = str(message.get("content") or "").strip()
        return json.dumps(["assistant", shown, calls], sort_keys=True, ensure_ascii=False)
    return json.dumps(message, sort_keys=True, ensure_ascii=False)


def reply_key(reply: Reply) -> str:
    """:func:`message_key` of the assistant message a client sends back for ``reply``."""
    calls = [{"function": {"name": c.name, "arguments": c.arguments}} for c in reply.tool_calls]
    return message_key({"role": "assistant", "content": reply.content, "tool_calls": calls})
