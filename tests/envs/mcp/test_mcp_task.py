"""The mcp_tools environment under our collector: tools from real MCP servers (the
published ``mcp-server-time`` over stdio, an SDK ``MCPServer`` over streamable HTTP),
schemas in the prompt, calls answered as masked tool turns, every call recorded."""

from __future__ import annotations

import asyncio
import json

import pytest
from mcp.server.mcpserver import MCPServer

from agentenvs.envs.mcp.task import MCPToolsConfig
from agentenvs.envs.openenv.running import serve_app
from agentenvs.envs.registry import make
from agentenvs.envs.tool_calls.record import ToolCallLog
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.data.samples import trajectory_to_samples
from agentenvs.rollout.inspect.check import check_file
from agentenvs.rollout.policies.scripted import ScriptedPolicy

pytestmark = pytest.mark.services
TOKYO_NOON = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.fixture(scope="module")
def http_url():
    server = MCPServer("lookup")

    @server.tool(description="The capital of a country.")
    def capital(country: str) -> str:
        return {"France": "Paris", "Japan": "Tokyo"}.get(country, "unknown")

    @server.tool(description="Answer after `seconds` seconds.")
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "late"

    with serve_app(server.streamable_http_app()) as running:
        yield f"{running.url}/mcp"


def config_for(http_url: str, tasks: list[dict]) -> MCPToolsConfig:
    servers = MCPToolsConfig.demo_overrides()["servers"] + [{"name": "lookup", "url": http_url}]
    return make("mcp_tools", servers=servers, tasks=tasks, call_timeout=0.5)


async def test_tool_episodes_under_the_collector_mask_every_tool_result(
    http_url, tokenizer, tmp_path
):
    tasks = [
        {
            "prompt": "Which city is the capital of Japan, and what time is it there at 12:00 UTC?",
            "answer": "Tokyo",
            "script": [
                call("capital", country="Japan") + call("convert_time", **TOKYO_NOON),
                call("slow", seconds=3),
                "The capital is Tokyo, at 21:00.",
            ],
        }
    ]
    config = config_for(http_url, tasks)
    store = TrajectoryStore(tmp_path / "mcp.jsonl")
    result = await collect(
        [config.group_builder(0, 2, tokenizer)],
        ScriptedPolicy(),
        CollectOptions(progress=False),
        store=store,
    )
    assert len(result.ok) == 1, [r.error for r in result.failed]
    trajectory = result.ok[0].group.trajectories[0]
    assert trajectory.stop_reason == "completed" and trajectory.step_reward == 1.0
    prompt = tokenizer.decode(trajectory.transitions[0].ob)
    for name in ("capital", "slow", "convert_time", "get_current_time"):
        assert f'"name": "{name}"' in prompt  # the schemas, in the template's tool block
    first, second, third = trajectory.transitions
    tool_turn = tokenizer.decode(second.ob[len(first.ob) + len(first.ac.tokens) :])
    assert tool_turn.count("<|im_start|>tool") == 2
    assert "Tokyo" in tool_turn and '"time_difference": "+9.0h"' in tool_turn
    assert first.metrics["tool/calls"] == 2 and first.metrics["tool/ok"] == 2
    assert second.metrics["tool/timeouts"] == 1
    assert "lookup/slow: timeout" in second.logs["tool_call_0"]
    log = ToolCallLog.from_logs(second.logs)
    assert [a.outcome for a in log.attempts] == ["timeout"]
    timed_out = tokenizer.decode(third.ob[len(second.ob) + len(second.ac.tokens) :])
    assert "slow timed out after 0.5s" in timed_out
    (sample,) = trajectory_to_samples(trajectory, 1.0)
    trained = [t for t, m in zip(sample.tokens, sample.loss_mask, strict=True) if m]
    assert trained == [t for tr in trajectory.transitions for t in tr.ac.tokens]
    report = check_file(store.path, tokenizer=tokenizer)
    assert [f for f in report.findings if f.status == "fail"] == []


async def test_unreadable_calls_are_answered_and_counted(http_url, tokenizer):
    tasks = [
        {
            "prompt": "Capital of France?",
            "answer": "Paris",
            "script": [
                '<tool_call>{"name": "capital", "arguments": {"country": France}}</tool_call>'
            ],
        }
    ]
    env = config_for(http_url, tasks).make_env(0, tokenizer)
    try:
        await env.initial_observation()
        action = tokenizer.encode(tasks[0]["script"][0] + "<|im_end|>", add_special_tokens=False)
        step = await env.step(action, extra={"stop_reason": "eos"})
        assert step.metrics["tool/parse_errors"] == 1 and step.metrics["tool/calls"] == 0
        shown = tokenizer.decode(step.next_observation)
        assert "could not read the tool call (malformed_json)" in shown
        assert "unparsed: malformed_json" in step.logs["tool_call_0"]
        wrong = tokenizer.encode("Lyon<|im_end|>", add_special_tokens=False)
        final = await env.step(wrong, extra={"stop_reason": "eos"})
        assert final.episode_done and final.reward == 0.0 and final.metrics["correct"] == 0
    finally:
        await env.close()


async def test_too_many_tool_calls_end_the_episode(http_url, tokenizer):
    config = config_for(http_url, [{"prompt": "Loop", "answer": None}])
    config = config.model_copy(update={"max_tool_calls": 2})
    env = config.make_env(0, tokenizer)
    try:
        await env.initial_observation()
        text = call("capital", country="Japan") * 3 + "<|im_end|>"
        step = await env.step(tokenizer.encode(text, add_special_tokens=False))
        assert step.episode_done and step.metrics["stop/max_tool_calls"] == 1
    finally:
        await env.close()
