"""Anthropic Messages: ``POST /v1/messages`` (plain and streamed) and ``/count_tokens``.

Shapes as in the ``anthropic`` SDK's ``types``. ``system`` (a string or text blocks)
becomes the system message, as does a ``system`` turn in ``messages``; a user turn's ``tool_result`` blocks become tool messages
in order, its text blocks user messages; an assistant turn's ``text`` and ``tool_use``
blocks one assistant message (``thinking`` blocks are the client's copy of reasoning
and are skipped). The answer is a ``message`` with a ``text`` block when the reply has
text and a ``tool_use`` block per call; ``stop_reason`` is ``tool_use``, ``max_tokens``,
``stop_sequence`` or ``end_turn``.

A stream is ``message_start`` (the message with no content yet), ``ping``, per block
``content_block_start`` / ``content_block_delta`` (``text_delta`` or
``input_json_delta``) / ``content_block_stop``, then ``message_delta`` (stop reason and
output tokens) and ``message_stop``; ``ping`` events keep it alive while sampling.
"""

from __future__ import annotations

import json
from typing import Any

from agentenvs.envs.harness.apis import (
    ToolSpec,
    positive_int,
    read_tools,
    require_dict,
    sse,
    string_list,
)
from agentenvs.envs.harness.conversation import (
    ChatRequest,
    Message,
    Reply,
    RequestError,
    call_message,
    text_of,
)

NAME = "messages"


def _blocks(content: Any, what: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise RequestError(f"{what}: content must be a string or a list of blocks")
    return [require_dict(b, f"{what}.content[]") for b in content]


def _user(index: int, content: Any) -> list[Message]:
    what = f"messages[{index}]"
    out: list[Message] = []
    texts: list[str] = []

    def flush() -> None:
        if texts:
            out.append({"role": "user", "content": "".join(texts)})
            texts.clear()

    for block in _blocks(content, what):
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_result":
            flush()
            result = block.get("content")
            text = (
                result if isinstance(result, str) else text_of(result, what=f"{what}.tool_result")
            )
            out.append(
                {"role": "tool", "content": text, "tool_call_id": str(block.get("tool_use_id", ""))}
            )
        else:
            raise RequestError(f"{what}: user content blocks of type {kind!r} are not supported")
    flush()
    return out


def _assistant(index: int, content: Any) -> Message:
    what = f"messages[{index}]"
    texts: list[str] = []
    calls = []
    for block in _blocks(content, what):
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            calls.append(
                call_message(block.get("id", ""), block.get("name"), block.get("input") or {})
            )
        elif kind in ("thinking", "redacted_thinking"):
            continue
        else:
            raise RequestError(
                f"{what}: assistant content blocks of type {kind!r} are not supported"
            )
    message: Message = {"role": "assistant", "content": "".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_spec(tool: dict[str, Any]) -> ToolSpec | None:
    if tool.get("type") not in (None, "custom") or "input_schema" not in tool:
        return None  # a server tool (web search, code execution): nothing here runs it
    return tool.get("name"), tool.get("description"), tool.get("input_schema")


class Messages:
    name = NAME

    def parse(self, body: Any, *, counting: bool = False) -> ChatRequest:
        """``counting``: a ``count_tokens`` body, which has no ``max_tokens``."""
        body = require_dict(body)
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw:
            raise RequestError("messages must be a non-empty list")
        messages: list[Message] = []
        system = body.get("system")
        if system:
            messages.append({"role": "system", "content": text_of(system, what="system")})
        for index, value in enumerate(raw):
            message = require_dict(value, f"messages[{index}]")
            role = message.get("role")
            if role == "user":
                messages += _user(index, message.get("content"))
            elif role == "assistant":
                messages.append(_assistant(index, message.get("content")))
            elif role == "system":  # system text mid-conversation (SystemMessageParam)
                content = text_of(message.get("content"), what=f"messages[{index}]")
                messages.append({"role": "system", "content": content})
            else:
                raise RequestError(
                    f"messages[{index}]: role must be user, assistant or system, got {role!r}"
                )
        max_tokens = positive_int(body.get("max_tokens"), "max_tokens")
        if max_tokens is None and not counting:
            raise RequestError("max_tokens is required")
        return ChatRequest(
            messages=messages,
            api=NAME,
            call_prefix="toolu",
            answer_prefix="msg",
            tools=read_tools(body.get("tools"), _tool_spec, "client tools with an input_schema"),
            model=str(body.get("model") or ""),
            stream=bool(body.get("stream")),
            max_tokens=max_tokens,
            stop=string_list(body.get("stop_sequences"), "stop_sequences"),
        )

    def response(self, reply: Reply, request: ChatRequest) -> dict[str, Any]:
        return {
            "id": reply.id,
            "type": "message",
            "role": "assistant",
            "model": reply.model,
            "content": _content(reply),
            "stop_reason": _stop_reason(reply),
            "stop_sequence": reply.stop_sequence,
            "usage": {
                "input_tokens": reply.prompt_tokens,
                "output_tokens": reply.completion_tokens,
            },
        }

    def stream(self, request: ChatRequest, answer_id: str, prompt_tokens: int) -> MessagesStream:
        return MessagesStream(request, answer_id, prompt_tokens)

    def error(self, status: int, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": _error_type(status), "message": message}}


def _error_type(status: int) -> str:
    return {400: "invalid_request_error", 404: "not_found_error", 429: "rate_limit_error"}.get(
        status, "invalid_request_error" if 400 <= status < 500 else "api_error"
    )


def _content(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.content or not reply.tool_calls:
        blocks.append({"type": "text", "text": reply.content})
    for call in reply.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        )
    return blocks


def _stop_reason(reply: Reply) -> str:
    if reply.tool_calls:
        return "tool_use"
    if reply.finish == "length":
        return "max_tokens"
    return "stop_sequence" if reply.stop_sequence else "end_turn"


class MessagesStream:
    def __init__(self, request: ChatRequest, answer_id: str, prompt_tokens: int) -> None:
        self.request = request
        self.id = answer_id
        self.prompt_tokens = prompt_tokens

    def opening(self) -> list[str]:
        message = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.request.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 0},
        }
        return [
            sse({"type": "message_start", "message": message}, event="message_start"),
            self.keepalive(),
        ]

    def keepalive(self) -> str:
        return sse({"type": "ping"}, event="ping")

    def closing(self, reply: Reply) -> list[str]:
        frames = []
        for index, block in enumerate(_content(reply)):
            if block["type"] == "text":
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                start = {**block, "input": {}}
                delta = {
                    "type": "input_json_delta",
                    "partial_json": json.dumps(block["input"], ensure_ascii=False),
                }
            frames += [
                sse(
                    {"type": "content_block_start", "index": index, "content_block": start},
                    event="content_block_start",
                ),
                sse(
                    {"type": "content_block_delta", "index": index, "delta": delta},
                    event="content_block_delta",
                ),
                sse({"type": "content_block_stop", "index": index}, event="content_block_stop"),
            ]
        frames.append(
            sse(
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": _stop_reason(reply),
                        "stop_sequence": reply.stop_sequence,
                    },
                    "usage": {"output_tokens": reply.completion_tokens},
                },
                event="message_delta",
            )
        )
        frames.append(sse({"type": "message_stop"}, event="message_stop"))
        return frames

    def failure(self, status: int, message: str) -> list[str]:
        error = {"type": "error", "error": {"type": _error_type(status), "message": message}}
        return [sse(error, event="error")]
