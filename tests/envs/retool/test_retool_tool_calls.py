"""ReTool records every tool-call attempt in its step logs, with the sandbox's outcome.

Runs on the real local sandbox (bubblewrap), as the other ReTool environment tests do:
an outcome of ``timeout`` or ``error`` is what the sandbox said about the program.
"""

from __future__ import annotations

import pytest_asyncio
from support.retool_actions import act

from agentenvs.envs.registry import make
from agentenvs.envs.retool.protocol import code_action
from agentenvs.envs.retool.sandboxes import close_shared_sandboxes
from agentenvs.envs.tool_calls import CallFormat, ToolCallLog


@pytest_asyncio.fixture(loop_scope="module", scope="module", autouse=True)
async def _close_sandboxes_after_module():
    yield
    await close_shared_sandboxes()


async def attempts_of(env, text: str) -> tuple[list[tuple[str, str]], ToolCallLog]:
    await env.initial_observation() if not getattr(env, "_started", False) else None
    env._started = True
    step = await act(env, text)
    log = ToolCallLog.from_logs(step.logs)
    assert log is not None, step.logs
    return [(str(a.status), str(a.outcome)) for a in log.attempts], log


async def test_outcomes_come_from_the_sandbox(tokenizer) -> None:
    env = make("retool", timeout=1.0, max_tool_calls=8).make_env(0, tokenizer)
    ran, log = await attempts_of(env, code_action("print(6 * 7)"))
    assert ran == [("ok", "ok")] and log.declared == (CallFormat.RETOOL_CODE,)
    assert log.result_open == "<interpreter>"
    assert (await attempts_of(env, code_action("raise SystemExit(3)")))[0] == [("ok", "error")]
    assert (await attempts_of(env, code_action("while True: pass")))[0] == [("ok", "timeout")]
    assert (await attempts_of(env, "<code>\n```python\n```\n</code>"))[0] == [
        ("invalid_argument", "not_run")
    ]
    done, _ = await attempts_of(env, "The answer is \\boxed{42}.")
    assert done == []  # the answer turn makes no attempt


async def test_calls_over_the_limits_are_too_many(tokenizer) -> None:
    env = make("retool", protocol="tool_call", max_tool_calls=1, on_max_tool_calls="refuse")
    env = env.make_env(0, tokenizer)
    first, log = await attempts_of(env, code_action("print(1)", protocol="tool_call"))
    assert first == [("ok", "ok")] and log.declared == (CallFormat.HERMES,)
    second, log = await attempts_of(env, code_action("print(2)", protocol="tool_call"))
    assert second == [("too_many_calls", "not_run")]
    assert "more than 1 tool call(s)" in log.attempts[0].detail


async def test_verl_rules_record_skipped_and_refused_calls(tokenizer) -> None:
    config = make("retool", protocol="tool_call", call_rules="verl", max_parallel_calls=1)
    env = config.make_env(0, tokenizer)
    text = (
        "<tool_call>\n{not json}\n</tool_call>\n"
        '<tool_call>\n{"name": "bash", "arguments": {"code": "ls"}}\n</tool_call>\n'
        + code_action("print(3)", protocol="tool_call")
    )
    ran, _ = await attempts_of(env, text)
    # verl skips the unreadable block; the first call left is answered with an error and
    # the one past max_parallel_calls is dropped.
    assert ran == [
        ("malformed_json", "not_run"),
        ("unknown_tool", "not_run"),
        ("too_many_calls", "not_run"),
    ]


async def test_a_call_in_another_template_is_recorded_as_undeclared(tokenizer) -> None:
    env = make("retool", protocol="tool_call").make_env(0, tokenizer)
    xml = "<tool_call>\n<function=code_interpreter>\n<parameter=code>\nprint(1)\n"
    xml += "</parameter>\n</function>\n</tool_call>"
    _, log = await attempts_of(env, xml)
    formats = [(str(a.format), str(a.status)) for a in log.attempts]
    # Read as declared it is broken JSON; read as Qwen3-Coder XML it is a call.
    assert formats == [("hermes", "malformed_json"), ("qwen3_coder", "ok")]
