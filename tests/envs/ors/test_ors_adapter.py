"""Any ORS environment under our collector, renderers, masks, tool-call audit and ``check``.

The ORS environment is written with the ``openreward`` SDK's own ``Environment``, ``@tool``
and ``@terminal`` (``tests/support/ors_arithmetic_env.py``, which imports nothing of ours)
and started from its server module with the SDK's ``Server.run`` in a subprocess, as an
ORS author runs one.
"""

from __future__ import annotations

import json
import re

import pytest
from support.env_servers import free_port, ors_arithmetic_server

from agentenvs.envs.registry import make
from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.data.samples import trajectory_to_samples
from agentenvs.rollout.inspect.check import check_file
from agentenvs.rollout.policies.base import current_turn

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def ors_url():
    with ors_arithmetic_server() as url:
        yield url


class Adder:
    """A model that asks the calculator for ``a + b``, then submits what it answered.

    ``wrong_lane``: the trajectory of the group that submits one more (reward 0);
    ``plain``: answer in a plain message (the terminal-tool environment)."""

    def __init__(self, tokenizer, *, wrong_lane: int | None = None, plain: bool = False):
        self.tokenizer, self.wrong_lane, self.plain = tokenizer, wrong_lane, plain

    async def __call__(self, ob, stop, *, max_tokens=None) -> TokensWithLogprobs:
        text = self.tokenizer.decode(ob)
        a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)", text)[-1])
        results = re.findall(r"<\|im_start\|>tool\n(.*?)<\|im_end\|>", text, re.S)
        slot = current_turn.get()
        off = int(slot is not None and slot.traj_index == self.wrong_lane)
        if self.plain:
            reply = str(a + b + off)
        elif not results:
            call = {"name": "calculator", "arguments": {"expression": f"{a} + {b}"}}
            reply = f"<tool_call>{json.dumps(call)}</tool_call>"
        else:
            call = {"name": "submit", "arguments": {"answer": int(results[-1]) + off}}
            reply = f"<tool_call>{json.dumps(call)}</tool_call>"
        tokens = self.tokenizer.encode(reply + "<|im_end|>", add_special_tokens=False)
        return TokensWithLogprobs(tokens, [-0.1] * len(tokens), "eos")


async def test_an_sdk_written_env_runs_under_our_collector(ors_url, tokenizer, tmp_path):
    config = make("ors", url=ors_url, environment="arithmetic", limits={"max_turns": 4})
    assert config.num_tasks("train") == 3 and config.num_tasks("test") == 1
    store = TrajectoryStore(tmp_path / "arith.jsonl")
    builders = [config.group_builder(i, 2, tokenizer) for i in range(3)]
    result = await collect(
        builders, Adder(tokenizer, wrong_lane=1), CollectOptions(progress=False), store=store
    )
    assert len(result.ok) == 3, [r.error for r in result.failed]
    for record in result.ok:
        right, wrong = record.group.trajectories
        assert [t.reward for t in right.transitions] == [0.0, 1.0]
        assert [t.reward for t in wrong.transitions] == [0.0, 0.0]  # the server's grade
        assert right.stop_reason == "completed"
        first, second = right.transitions
        answer = second.ob[len(first.ob) + len(first.ac.tokens) :]
        assert "tool\n" in tokenizer.decode(answer)  # the calculator's output, env tokens
        calls = [json.loads(t.logs["tool_calls"])["attempts"][0] for t in right.transitions]
        assert [(c["name"], c["status"], c["outcome"]) for c in calls] == [
            ("calculator", "ok", "ok"),
            ("submit", "ok", "ok"),
        ]
        (sample,) = trajectory_to_samples(right, 1.0)
        trained = [t for t, m in zip(sample.tokens, sample.loss_mask, strict=True) if m]
        assert trained == [t for tr in right.transitions for t in tr.ac.tokens]
    prompts = [tokenizer.decode(r.group.trajectories[0].transitions[0].ob) for r in result.ok]
    assert any("What is 300 + 45?" in p for p in prompts)  # records come in finishing order
    assert all('"name": "submit"' in p for p in prompts)  # the tool list, by the template
    report = check_file(store.path, tokenizer=tokenizer)
    assert [f for f in report.findings if f.status == "fail"] == []


async def test_a_plain_reply_goes_to_the_terminal_tool(ors_url, tokenizer):
    config = make("ors", url=ors_url, environment="plainanswer", limits={"max_turns": 2})
    result = await collect(
        [config.group_builder(0, 2, tokenizer)],
        Adder(tokenizer, wrong_lane=1, plain=True),
        CollectOptions(progress=False),
    )
    (record,) = result.ok
    right, wrong = record.group.trajectories
    assert [t.reward for t in right.transitions] == [1.0]
    assert [t.reward for t in wrong.transitions] == [0.0]
    assert right.transitions[0].logs["ors_terminal_tool"] == "grade"


class Scribbler:
    """Writes a tool call the parser cannot read, then an unknown tool, then stops."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.replies = [
            '<tool_call>{"name": "calculator", "arguments": </tool_call>',
            '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',
            "I give up.",
        ]

    async def __call__(self, ob, stop, *, max_tokens=None) -> TokensWithLogprobs:
        turn = self.tokenizer.decode(ob).count("<|im_start|>assistant") - 1
        reply = self.replies[min(turn, 2)] + "<|im_end|>"
        tokens = self.tokenizer.encode(reply, add_special_tokens=False)
        return TokensWithLogprobs(tokens, [-0.1] * len(tokens), "eos")


async def test_bad_calls_are_answered_and_recorded_not_raised(ors_url, tokenizer):
    config = make("ors", url=ors_url, environment="arithmetic", limits={"max_turns": 5})
    result = await collect(
        [config.group_builder(0, 1, tokenizer)],
        Scribbler(tokenizer),
        CollectOptions(progress=False),
    )
    (trajectory,) = result.ok[0].group.trajectories
    broken, unknown, final = trajectory.transitions
    statuses = [
        json.loads(t.logs["tool_calls"])["attempts"][0]["status"] for t in (broken, unknown)
    ]
    assert statuses == ["malformed_json", "unknown_tool"]
    assert final.metrics["ors_no_tool_call"] == 1 and trajectory.stop_reason == "completed"
    assert sum(t.reward for t in trajectory.transitions) == 0.0


async def test_an_unreachable_server_fails_its_groups_with_the_reason(tokenizer):
    config = make("ors", url=f"http://127.0.0.1:{free_port()}", environment="x", episodes=1)
    result = await collect(
        [config.group_builder(0, 1, tokenizer)],
        Adder(tokenizer),
        CollectOptions(retries=0, progress=False),
    )
    assert not result.ok
    assert "ORSUnreachable" in result.failed[0].error


def test_blocks_are_read_by_their_sdk_types():
    """The SDK client's block classes: text is shown, a tool result shows its own blocks,
    an image (counted) or a reasoning segment leaves a placeholder."""
    from agentenvs.envs.ors.sdk import load_sdk

    load_sdk()  # the SDK's log level, before its modules load
    from openreward.api.environments.types import (
        ImageBlock,
        ReasoningBlock,
        TextBlock,
        ToolResultBlock,
    )

    from agentenvs.envs.ors.adapter import blocks_text

    image = ImageBlock(data="aGk=", mimeType="image/png")
    blocks = [
        TextBlock(text="a"),
        ReasoningBlock(text="hidden"),
        ToolResultBlock(tool_call_id="1", blocks=[TextBlock(text="b"), image]),
        image,
    ]
    assert blocks_text(blocks) == (
        "a\n[reasoning omitted]\nb\n[image omitted]\n[image omitted]",
        2,
    )
