"""The gateway's three APIs against the official SDKs (``openai``, ``anthropic``) as clients.

Each API is driven by its own SDK through a tool round trip, plain and streamed: the
first answer must come back as a tool call in the API's own shape (read by the SDK's
types and stream helpers, which assemble streamed events the way a harness does), the
client sends it back with a tool result, and the second request must be recognised as
the continuation of the first (``extend``: one segment, the sampled tokens kept). The
raw bodies and every streamed event are also validated strictly against the SDKs'
pydantic types, so a missing required field fails even where the SDK's own reader would
have tolerated it.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from support.gateway_helpers import (
    BASH_TOOL,
    ScriptPolicy,
    list_then_answer,
    qwen3,
    running_gateway,
)

from agentenvs.envs.harness.segments import START_LOG

pytestmark = pytest.mark.asyncio

PARAMETERS = BASH_TOOL["function"]["parameters"]
RESPONSES_TOOL = {"type": "function", "name": "bash", "parameters": PARAMETERS}
ANTHROPIC_TOOL = {"name": "bash", "description": "Run a command.", "input_schema": PARAMETERS}


async def _chat(base: str, stream: bool) -> tuple[str, str]:
    import openai

    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused")
    messages: list[Any] = [
        {"role": "system", "content": "You run shell commands."},
        {"role": "user", "content": "What files are here?"},
    ]

    async def ask() -> Any:
        if not stream:
            answer = await client.chat.completions.create(
                model="m", messages=messages, tools=[BASH_TOOL]
            )
            return answer.choices[0].message, answer.choices[0].finish_reason
        chunks = await client.chat.completions.create(
            model="m", messages=messages, tools=[BASH_TOOL], stream=True
        )
        content, calls, finish = "", {}, None
        async for chunk in chunks:
            delta = chunk.choices[0].delta
            content += delta.content or ""
            for call in delta.tool_calls or []:
                calls[call.index] = call
            finish = chunk.choices[0].finish_reason or finish
        tool_calls = [
            {"id": c.id, "type": "function", "function": c.function.model_dump()}
            for c in calls.values()
        ]
        return {"role": "assistant", "content": content, "tool_calls": tool_calls}, finish

    first, finish = await ask()
    first = first if isinstance(first, dict) else first.model_dump(exclude_none=True)
    assert finish == "tool_calls"
    call = first["tool_calls"][0]
    assert call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == {"command": "ls"}
    messages += [first, {"role": "tool", "tool_call_id": call["id"], "content": "a.py\nb.py"}]
    second, finish = await ask()
    second = second if isinstance(second, dict) else second.model_dump(exclude_none=True)
    assert finish == "stop"
    return first["content"], second["content"]


async def _responses(base: str, stream: bool) -> tuple[str, str]:
    import openai

    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused")
    items: list[Any] = [{"role": "user", "content": "What files are here?"}]

    async def ask() -> Any:
        kwargs = {
            "model": "m",
            "input": items,
            "tools": [RESPONSES_TOOL],
            "instructions": "You run shell commands.",
        }
        if not stream:
            return await client.responses.create(**kwargs)
        async with client.responses.stream(**kwargs) as events:
            return await events.get_final_response()

    first = await ask()
    calls = [o for o in first.output if o.type == "function_call"]
    assert [c.name for c in calls] == ["bash"]
    assert json.loads(calls[0].arguments) == {"command": "ls"}
    items += [o.model_dump(exclude_none=True) for o in first.output]
    items.append({"type": "function_call_output", "call_id": calls[0].call_id, "output": "a.py"})
    second = await ask()
    assert second.status == "completed"
    return first.output_text, second.output_text


async def _messages(base: str, stream: bool) -> tuple[str, str]:
    import anthropic

    client = anthropic.AsyncAnthropic(base_url=base, api_key="unused")
    messages: list[Any] = [{"role": "user", "content": "What files are here?"}]

    async def ask() -> Any:
        kwargs = {
            "model": "m",
            "max_tokens": 200,
            "system": "You run shell commands.",
            "messages": messages,
            "tools": [ANTHROPIC_TOOL],
        }
        if not stream:
            return await client.messages.create(**kwargs)
        async with client.messages.stream(**kwargs) as events:
            return await events.get_final_message()

    first = await ask()
    assert first.stop_reason == "tool_use"
    use = next(b for b in first.content if b.type == "tool_use")
    assert (use.name, use.input) == ("bash", {"command": "ls"})
    messages.append({"role": "assistant", "content": [b.model_dump() for b in first.content]})
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "a.py\nb.py"}
    messages.append({"role": "user", "content": [result]})
    second = await ask()
    assert second.stop_reason == "end_turn"
    text = lambda m: "".join(b.text for b in m.content if b.type == "text")  # noqa: E731
    return text(first), text(second)


CLIENTS = {"chat": _chat, "responses": _responses, "messages": _messages}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("api", sorted(CLIENTS))
async def test_sdk_tool_round_trip_continues_one_segment(api: str, stream: bool) -> None:
    policy = ScriptPolicy(qwen3(), list_then_answer)
    async with running_gateway(policy) as server:
        first, second = await CLIENTS[api](server.session_url("episode", openai=False), stream)
        assert first == "Let me look at the files."
        assert second == "The directory holds a.py and b.py."
        record = await server.gateway.finish("episode")
    transitions = record.group.trajectories[0].transitions
    assert [t.logs[START_LOG] for t in transitions] == ["first", "extend"]
    # The second prompt holds the first turn's sampled ids as they were sampled.
    assert policy.prompts[1][: len(policy.prompts[0])] == policy.prompts[0]
    assert transitions[1].ob[: len(transitions[0].ob) + len(transitions[0].ac.tokens)] == (
        transitions[0].ob + transitions[0].ac.tokens
    )


def _frames(body: str) -> list[tuple[str | None, str]]:
    frames = []
    for block in body.strip().split("\n\n"):
        event, data = None, []
        for line in block.splitlines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        if data:
            frames.append((event, "\n".join(data)))
    return frames


def _strict_chat(body: str, stream: bool) -> None:
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    if not stream:
        ChatCompletion.model_validate(json.loads(body), strict=False)
        return
    frames = _frames(body)
    assert frames[-1][1] == "[DONE]"
    for _, data in frames[:-1]:
        ChatCompletionChunk.model_validate(json.loads(data))


def _strict_responses(body: str, stream: bool) -> None:
    from openai.types.responses import Response, ResponseStreamEvent
    from pydantic import TypeAdapter

    if not stream:
        Response.model_validate(json.loads(body))
        return
    adapter = TypeAdapter(ResponseStreamEvent)
    events = [json.loads(data) for _, data in _frames(body)]
    for event in events:
        adapter.validate_python(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"


def _strict_messages(body: str, stream: bool) -> None:
    from anthropic.types import Message, RawMessageStreamEvent
    from pydantic import TypeAdapter

    if not stream:
        Message.model_validate(json.loads(body))
        return
    adapter = TypeAdapter(RawMessageStreamEvent)
    kinds = []
    for event, data in _frames(body):
        payload = json.loads(data)
        assert event == payload["type"]
        kinds.append(event)
        if event != "ping":
            adapter.validate_python(payload)
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]


STRICT = {
    "chat": ("/v1/chat/completions", _strict_chat),
    "responses": ("/v1/responses", _strict_responses),
    "messages": ("/v1/messages", _strict_messages),
}
BODIES = {
    "chat": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [BASH_TOOL]},
    "responses": {"model": "m", "input": "hi", "tools": [RESPONSES_TOOL]},
    "messages": {
        "model": "m",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [ANTHROPIC_TOOL],
    },
}


async def test_every_body_and_event_validates_against_the_sdk_types() -> None:
    policy = ScriptPolicy(qwen3(), list_then_answer)
    async with running_gateway(policy) as server, httpx.AsyncClient() as http:
        for api, (path, validate) in STRICT.items():
            for stream in (False, True):
                url = server.session_url(f"{api}-{stream}", openai=False) + path
                answer = await http.post(url, json={**BODIES[api], "stream": stream})
                assert answer.status_code == 200, answer.text
                validate(answer.text, stream)


async def test_bad_requests_get_each_apis_error_and_sample_nothing() -> None:
    import anthropic
    import openai

    policy = ScriptPolicy(qwen3(), list_then_answer)
    async with running_gateway(policy, max_context=150) as server:
        chat = openai.AsyncOpenAI(base_url=server.session_url("bad"), api_key="unused")
        with pytest.raises(openai.BadRequestError, match="unknown role"):
            await chat.chat.completions.create(
                model="m", messages=[{"role": "wizard", "content": "hi"}]
            )
        with pytest.raises(openai.BadRequestError) as long:
            await chat.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "word " * 400}]
            )
        assert long.value.code == "context_length_exceeded"
        with pytest.raises(openai.BadRequestError, match="previous_response_id"):
            await chat.responses.create(model="m", input="hi", previous_response_id="resp_1")
        claude = anthropic.AsyncAnthropic(
            base_url=server.session_url("bad", openai=False), api_key="unused"
        )
        with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
            await claude.messages.create(
                model="m", max_tokens=10, messages=[{"role": "user", "content": "word " * 400}]
            )
        unnamed = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused")
        with pytest.raises(openai.NotFoundError, match="name the session"):
            await unnamed.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
    assert policy.prompts == []


async def test_concurrent_sessions_never_mix() -> None:
    import asyncio

    import openai

    policy = ScriptPolicy(qwen3(), list_then_answer)
    async with running_gateway(policy) as server:

        async def episode(key: str, by_header: bool) -> None:
            base = server.url + "/v1" if by_header else server.session_url(key)
            headers = {"X-Agentenvs-Session": key} if by_header else {}
            client = openai.AsyncOpenAI(base_url=base, api_key="unused", default_headers=headers)
            messages: list[Any] = [{"role": "user", "content": f"episode {key}: list files"}]
            answer = await client.chat.completions.create(
                model="m", messages=messages, tools=[BASH_TOOL]
            )
            reply = answer.choices[0].message
            messages.append(reply.model_dump(exclude_none=True))
            tool = {"role": "tool", "tool_call_id": reply.tool_calls[0].id, "content": key}
            await client.chat.completions.create(
                model="m", messages=[*messages, tool], tools=[BASH_TOOL]
            )

        keys = [f"ep{i}" for i in range(8)]
        await asyncio.gather(*(episode(k, i % 2 == 0) for i, k in enumerate(keys)))
        records = [await server.gateway.finish(k) for k in keys]
    tokenizer = qwen3()
    for key, record in zip(keys, records, strict=True):
        transitions = record.group.trajectories[0].transitions
        assert [t.logs[START_LOG] for t in transitions] == ["first", "extend"]
        text = tokenizer.decode(transitions[-1].ob)
        assert f"episode {key}:" in text and f"<tool_response>\n{key}\n" in text
        assert all(f"episode {other}:" not in text for other in keys if other != key)
