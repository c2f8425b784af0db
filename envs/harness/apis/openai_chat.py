"""OpenAI Chat Completions: ``POST /v1/chat/completions``, plain and streamed.

Shapes as in the ``openai`` SDK's ``types/chat``: a ``chat.completion`` with one choice
whose message carries ``content`` (null when the reply is only tool calls) and
``tool_calls`` (``{"id", "type": "function", "function": {"name", "arguments"}}``, the
arguments as JSON text); a stream of ``chat.completion.chunk`` objects, the first with
the role, then the content, each tool call as one delta with its ``index``, a last
chunk with ``finish_reason``, a usage chunk with no choices when
``stream_options.include_usage`` asks for it, and ``data: [DONE]``. Reasoning (a
``<think>`` block) travels as ``reasoning_content``, as vLLM and SGLang send it.
"""

from __future__ import annotations

import time
from typing import Any

from agentenvs.envs.harness.apis import (
    ToolSpec,
    openai_error,
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

NAME = "chat"


def _message(index: int, raw: Any) -> Message:
    what = f"messages[{index}]"
    message = require_dict(raw, what)
    role = message.get("role")
    content = text_of(message.get("content"), what=what)
    if role in ("system", "developer"):
        return {"role": "system", "content": content}
    if role == "user":
        return {"role": "user", "content": content}
    if role in ("tool", "function"):
        return {
            "role": "tool",
            "content": content,
            "tool_call_id": str(message.get("tool_call_id") or ""),
        }
    if role != "assistant":
        raise RequestError(f"{what}: unknown role {role!r}")
    out: Message = {"role": "assistant", "content": content}
    calls = []
    for raw_call in message.get("tool_calls") or []:
        call = require_dict(raw_call, f"{what}.tool_calls[]")
        function = require_dict(call.get("function"), f"{what}.tool_calls[].function")
        calls.append(
            call_message(call.get("id", ""), function.get("name"), function.get("arguments"))
        )
    if calls:
        out["tool_calls"] = calls
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        out["reasoning_content"] = reasoning
    return out


def _tool_spec(tool: dict[str, Any]) -> ToolSpec | None:
    function = tool.get("function")
    if tool.get("type", "function") != "function" or not isinstance(function, dict):
        return None
    return function.get("name"), function.get("description"), function.get("parameters")


class ChatCompletions:
    name = NAME

    def parse(self, body: Any) -> ChatRequest:
        body = require_dict(body)
        raw_messages = body.get("messages")
        if not isinstance(raw_messages, list) or not raw_messages:
            raise RequestError("messages must be a non-empty list")
        if body.get("n") not in (None, 1):
            raise RequestError("only n=1 is supported")
        options = body.get("stream_options") or {}
        return ChatRequest(
            messages=[_message(i, m) for i, m in enumerate(raw_messages)],
            api=NAME,
            call_prefix="call",
            answer_prefix="chatcmpl",
            tools=read_tools(body.get("tools"), _tool_spec, "function tools"),
            model=str(body.get("model") or ""),
            stream=bool(body.get("stream")),
            max_tokens=positive_int(
                body.get("max_completion_tokens") or body.get("max_tokens"), "max_tokens"
            ),
            stop=string_list(body.get("stop"), "stop"),
            include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        )

    def response(self, reply: Reply, request: ChatRequest) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.content if reply.content or not reply.tool_calls else None,
            "refusal": None,
        }
        if reply.tool_calls:
            message["tool_calls"] = [_call(c) for c in reply.tool_calls]
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        return {
            "id": reply.id,
            "object": "chat.completion",
            "created": reply.created,
            "model": reply.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": reply.finish, "logprobs": None}
            ],
            "usage": _usage(reply),
        }

    def stream(self, request: ChatRequest, answer_id: str, prompt_tokens: int) -> ChatStream:
        return ChatStream(request, answer_id)

    def error(self, status: int, message: str) -> dict[str, Any]:
        return {"error": openai_error(status, message)}


def _call(call: Any) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments_json()},
    }


def _usage(reply: Reply) -> dict[str, int]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }


class ChatStream:
    def __init__(self, request: ChatRequest, answer_id: str) -> None:
        self.request = request
        self.id = answer_id
        self.created = int(time.time())

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse(
            {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.request.model,
                "choices": [choice],
            }
        )

    def opening(self) -> list[str]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def keepalive(self) -> str:
        return ": keep-alive\n\n"

    def closing(self, reply: Reply) -> list[str]:
        frames = []
        if reply.reasoning:
            frames.append(self._chunk({"reasoning_content": reply.reasoning}))
        if reply.content:
            frames.append(self._chunk({"content": reply.content}))
        for index, call in enumerate(reply.tool_calls):
            frames.append(self._chunk({"tool_calls": [{"index": index, **_call(call)}]}))
        frames.append(self._chunk({}, reply.finish))
        if self.request.include_usage:
            usage = {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.request.model,
                "choices": [],
                "usage": _usage(reply),
            }
            frames.append(sse(usage))
        frames.append(sse("[DONE]"))
        return frames

    def failure(self, status: int, message: str) -> list[str]:
        return [sse({"error": openai_error(status, message)}), sse("[DONE]")]
