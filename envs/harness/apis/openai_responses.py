"""OpenAI Responses: ``POST /v1/responses``, plain and streamed, stateless.

Shapes as in the ``openai`` SDK's ``types/responses``. The input is ``instructions`` (a
system message) and ``input``: a string, or items (``message`` with ``input_text`` /
``output_text`` parts, ``function_call``, ``function_call_output``; ``reasoning`` items
are skipped, their text is the client's copy of what the model wrote). The answer is
a ``response`` whose ``output`` holds a ``message`` item (one ``output_text`` part) when
the reply has text and one ``function_call`` item per call.

A stream is ``response.created``, ``response.in_progress``, then per output item
``output_item.added``, its content (``content_part.added``, ``output_text.delta``,
``output_text.done``, ``content_part.done``, or ``function_call_arguments.delta`` and
``.done``), ``output_item.done``, and ``response.completed`` (``response.incomplete``
when the token cap cut the reply); every event has a ``sequence_number`` from 0.

``previous_response_id`` (server-side conversation state) is refused: a harness that
trains through the gateway sends its whole input (``store: false``), which is what the
token record needs anyway.
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
)
from agentenvs.envs.harness.conversation import (
    ChatRequest,
    Message,
    Reply,
    RequestError,
    call_message,
    text_of,
)

NAME = "responses"


def _messages(body: dict[str, Any]) -> list[Message]:
    messages: list[Message] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    raw = body.get("input")
    if isinstance(raw, str):
        return [*messages, {"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise RequestError("input must be a string or a non-empty list of items")
    for index, value in enumerate(raw):
        what = f"input[{index}]"
        item = require_dict(value, what)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            content = text_of(item.get("content"), what=what)
            if role in ("system", "developer"):
                messages.append({"role": "system", "content": content})
            elif role in ("user", "assistant"):
                messages.append({"role": role, "content": content})
            else:
                raise RequestError(f"{what}: unknown role {role!r}")
        elif kind == "function_call":
            call = call_message(item.get("call_id", ""), item.get("name"), item.get("arguments"))
            last = messages[-1] if messages else None
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": ""}
                messages.append(last)
            last.setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            output = item.get("output")
            content = text_of(output, what=what) if not isinstance(output, str) else output
            messages.append(
                {"role": "tool", "content": content, "tool_call_id": str(item.get("call_id", ""))}
            )
        elif kind == "reasoning":
            continue
        else:
            raise RequestError(f"{what}: input items of type {kind!r} are not supported")
    return messages


HOSTED_TOOLS = frozenset(
    {"web_search", "web_search_preview", "file_search", "code_interpreter", "image_generation",
     "computer_use_preview", "mcp"}
)  # fmt: skip
"""Tools the API's server runs itself: nothing behind the gateway can, so the model is not
offered them (a harness that lists web search by default still works, offline)."""


def _tool_spec(tool: dict[str, Any]) -> ToolSpec | None:
    if tool.get("type") != "function":
        return None
    return tool.get("name"), tool.get("description"), tool.get("parameters")


def _flat_tools(raw: Any) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Function tools, with each ``namespace`` group's tools listed by their own names
    (a call to one is answered with its ``namespace``); hosted tools left out."""
    flat: list[dict[str, Any]] = []
    namespaces: dict[str, str] = {}
    for index, item in enumerate(raw or []):
        tool = require_dict(item, f"tools[{index}]")
        kind = tool.get("type")
        if kind in HOSTED_TOOLS:
            continue
        if kind == "namespace":
            for inner in tool.get("tools") or []:
                flat.append(require_dict(inner, f"tools[{index}].tools[]"))
                namespaces[str(flat[-1].get("name"))] = str(tool.get("name"))
            continue
        flat.append(tool)
    return flat, namespaces


class Responses:
    name = NAME

    def parse(self, body: Any) -> ChatRequest:
        body = require_dict(body)
        if body.get("previous_response_id"):
            raise RequestError(
                "previous_response_id is not supported: send the whole conversation as input "
                "(store: false)"
            )
        tools, namespaces = _flat_tools(body.get("tools"))
        return ChatRequest(
            messages=_messages(body),
            api=NAME,
            call_prefix="call",
            answer_prefix="resp",
            tools=read_tools(tools, _tool_spec, "function tools"),
            model=str(body.get("model") or ""),
            stream=bool(body.get("stream")),
            max_tokens=positive_int(body.get("max_output_tokens"), "max_output_tokens"),
            echo={
                "tools": list(body.get("tools") or []),
                "instructions": body.get("instructions"),
                "max_output_tokens": body.get("max_output_tokens"),
                "tool_choice": body.get("tool_choice") or "auto",
                "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
                "namespaces": namespaces,
            },
        )

    def response(self, reply: Reply, request: ChatRequest) -> dict[str, Any]:
        return _response(
            reply.id, request, reply.created, _status(reply), _items(reply, request), reply
        )

    def stream(self, request: ChatRequest, answer_id: str, prompt_tokens: int) -> ResponsesStream:
        return ResponsesStream(request, answer_id)

    def error(self, status: int, message: str) -> dict[str, Any]:
        return {"error": openai_error(status, message)}


def _status(reply: Reply) -> str:
    return "incomplete" if reply.finish == "length" else "completed"


def _items(reply: Reply, request: ChatRequest) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.content:
        items.append(_message_item(reply, reply.content, "completed"))
    for call in reply.tool_calls:
        items.append(
            _call_item(call, call.arguments_json(), "completed", _namespace(request, call))
        )
    return items


def _namespace(request: ChatRequest, call: Any) -> str | None:
    return (request.echo.get("namespaces") or {}).get(call.name)


def _message_item(reply_or_id: Any, text: str | None, status: str) -> dict[str, Any]:
    answer = reply_or_id if isinstance(reply_or_id, str) else reply_or_id.id
    content = [] if text is None else [_text_part(text)]
    return {
        "type": "message",
        "id": f"msg_{answer}",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _call_item(call: Any, arguments: str, status: str, namespace: str | None) -> dict[str, Any]:
    item = {
        "type": "function_call",
        "id": f"fc_{call.id}",
        "call_id": call.id,
        "name": call.name,
        "arguments": arguments,
        "status": status,
    }
    return item if namespace is None else {**item, "namespace": namespace}


def _response(
    answer_id: str,
    request: ChatRequest,
    created: int,
    status: str,
    output: list[dict[str, Any]],
    reply: Reply | None,
) -> dict[str, Any]:
    echo = request.echo
    usage = None
    if reply is not None:
        usage = {
            "input_tokens": reply.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": reply.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        }
    return {
        "id": answer_id,
        "object": "response",
        "created_at": created,
        "model": request.model,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": echo.get("instructions"),
        "max_output_tokens": echo.get("max_output_tokens"),
        "output": output,
        "parallel_tool_calls": echo.get("parallel_tool_calls", True),
        "tool_choice": echo.get("tool_choice", "auto"),
        "tools": echo.get("tools", []),
        "temperature": None,
        "top_p": None,
        "usage": usage,
    }


class ResponsesStream:
    def __init__(self, request: ChatRequest, answer_id: str) -> None:
        self.request = request
        self.id = answer_id
        self.created = int(time.time())
        self.sequence = 0

    def _event(self, kind: str, **fields: Any) -> str:
        frame = sse({"type": kind, "sequence_number": self.sequence, **fields}, event=kind)
        self.sequence += 1
        return frame

    def opening(self) -> list[str]:
        started = _response(self.id, self.request, self.created, "in_progress", [], None)
        return [
            self._event("response.created", response=started),
            self._event("response.in_progress", response=started),
        ]

    def keepalive(self) -> str:
        return ": keep-alive\n\n"

    def closing(self, reply: Reply) -> list[str]:
        frames: list[str] = []
        index = 0
        if reply.content:
            item = _message_item(reply, None, "in_progress")
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            frames += [
                self._event("response.output_item.added", output_index=index, item=item),
                self._event("response.content_part.added", part=_text_part(""), **where),
                self._event(
                    "response.output_text.delta", delta=reply.content, logprobs=[], **where
                ),
                self._event("response.output_text.done", text=reply.content, logprobs=[], **where),
                self._event("response.content_part.done", part=_text_part(reply.content), **where),
                self._event(
                    "response.output_item.done",
                    output_index=index,
                    item=_message_item(reply, reply.content, "completed"),
                ),
            ]
            index += 1
        for call in reply.tool_calls:
            arguments = call.arguments_json()
            namespace = _namespace(self.request, call)
            item = _call_item(call, "", "in_progress", namespace)
            where = {"item_id": item["id"], "output_index": index}
            frames += [
                self._event("response.output_item.added", output_index=index, item=item),
                self._event("response.function_call_arguments.delta", delta=arguments, **where),
                self._event(
                    "response.function_call_arguments.done",
                    arguments=arguments,
                    name=call.name,
                    **where,
                ),
                self._event(
                    "response.output_item.done",
                    output_index=index,
                    item=_call_item(call, arguments, "completed", namespace),
                ),
            ]
            index += 1
        status = _status(reply)
        final = _response(
            self.id, self.request, self.created, status, _items(reply, self.request), reply
        )
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        frames.append(self._event(kind, response=final))
        return frames

    def failure(self, status: int, message: str) -> list[str]:
        error = openai_error(status, message)
        return [
            self._event("error", code=error["code"] or error["type"], message=message, param=None)
        ]
