"""preset=verl_retool: each knob against verl's ReTool recipe, over hand-written actions.

Facts from verl recipe/retool (retool.py compute_score and CustomSandboxFusionTool.execute,
run_qwen2_7b_dapo.sh, sandbox_fusion_tool_config.yaml) and verl/utils/reward_score/math_dapo.py.
Code runs in the real local sandbox.
"""

from __future__ import annotations

import json

import pytest
import pytest_asyncio
from support import machine_skips
from support.retool_cli_helpers import AGENTENVS

from agentenvs.envs.registry import make
from agentenvs.envs.retool.protocol import code_action
from agentenvs.envs.retool.reward import dapo_last_boxed, strict_box_correct
from agentenvs.envs.retool.sandboxes import close_shared_sandboxes

pytestmark = machine_skips.needs(*machine_skips.LOCAL_SANDBOX)
in_module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module", autouse=True)
async def _close_sandboxes():
    yield
    await close_shared_sandboxes()


def call(code: str) -> str:
    return (
        "<tool_call>"
        + json.dumps({"name": "code_interpreter", "arguments": {"code": code}})
        + "</tool_call>"
    )


async def play(env, texts: list[str], stop: str = "eos"):
    await env.initial_observation()
    results = []
    for text in texts:
        tokens = env.renderer.encode(text)
        if stop == "eos":
            tokens += env.renderer.end_of_turn_tokens()
        result = await env.step(tokens, extra={"stop_reason": stop})
        results.append(result)
        if result.episode_done:
            break
    return results


def preset(**extra):
    return make("retool", preset="verl_retool", **extra)


def test_preset_values():
    cfg = preset()
    assert cfg.protocol == "tool_call" and cfg.timeout == 30 and cfg.limits.max_turns == 16
    assert cfg.grader == "strict_box" and cfg.grader_scope == "whole_response"
    assert cfg.tool_shaping and cfg.error_detail == "traceback" and cfg.print_last_line
    assert cfg.max_parallel_calls == 1 and cfg.limits.on_truncated_action == "pass"
    assert make("retool").grader == "math_verify"  # today's default is unchanged


def test_dapo_strict_box_has_no_fallback_for_an_unbalanced_last_box():
    assert dapo_last_boxed("\\boxed{7} and \\boxed{oops") is None
    assert strict_box_correct("so \\boxed{7} and \\boxed{oops", "7") == (False, None)
    assert strict_box_correct("so \\boxed{7}", "7") == (True, "7")


@in_module_loop
async def test_the_last_line_is_printed_and_only_the_first_call_runs(tokenizer):
    env = preset().make_env(0, tokenizer)
    (result,) = await play(env, [call("x = 6 * 7\nx") + call("print(1)")])
    assert env.task.tool_calls == 1
    assert env.task.last_output == "42"
    text = tokenizer.decode(result.next_observation)
    assert text.count("<|im_start|>tool") == 1


@in_module_loop
async def test_full_stderr_is_shown(tokenizer):
    env = preset().make_env(0, tokenizer)
    await play(env, [call("def f():\n    return 1 / 0\nf()")])
    assert "Traceback" in env.task.last_output and "ZeroDivisionError" in env.task.last_output


@in_module_loop
async def test_wrong_answers_are_shaped_per_tool_turn(tokenizer):
    cfg = preset()
    answer = cfg.problems()[0].answer
    results = await play(cfg.make_env(0, tokenizer), [call("print(1)"), "\\boxed{-12345}"])
    assert results[-1].reward == pytest.approx(-0.9)
    assert answer != "-12345"


@in_module_loop
async def test_a_box_printed_by_code_is_not_the_models_answer(tokenizer):
    cfg = preset()
    answer = cfg.problems()[0].answer
    code = f"print('\\\\boxed{{{answer}}}')"
    results = await play(cfg.make_env(0, tokenizer), [call(code), "Done."])
    final = results[-1].metrics
    assert final["answered"] == 0
    # verl grades the whole response, tool output included: the printed box counts there.
    assert final["correct"] == 1
    mine = make("retool", protocol="tool_call")
    results = await play(mine.make_env(0, tokenizer), [call(code), "Done."])
    assert results[-1].metrics["answered"] == 0 and results[-1].metrics["correct"] == 0


@in_module_loop
async def test_eos_after_code_is_the_answer_turn_by_default(tokenizer):
    cfg = make("retool")
    answer = cfg.problems()[0].answer
    text = code_action("print(1)") + f" so <answer>\\boxed{{{answer}}}</answer>"
    (result,) = await play(cfg.make_env(0, tokenizer), [text])
    assert result.episode_done and result.metrics["tool_calls"] == 0
    ran = await play(make("retool", code_at_eos="run").make_env(0, tokenizer), [text])
    assert not ran[0].episode_done


def test_rollout_cli_runs_the_preset_with_the_oracle(tmp_path):
    import subprocess

    out = tmp_path / "retool.jsonl"
    command = [AGENTENVS, "rollout", "retool", "--set", "preset=verl_retool", "--groups", "2",
               "--group-size", "2", "--out", str(out), "--json-summary", "--no-progress"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["failed"] == 0 and summary["mean_reward"] == 1.0
