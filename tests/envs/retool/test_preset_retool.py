"""preset=verl_retool: each knob against verl's ReTool recipe, over hand-written actions.

Facts from verl recipe/retool (retool.py compute_score and CustomSandboxFusionTool.execute,
run_qwen2_7b_dapo.sh, sandbox_fusion_tool_config.yaml) and verl/utils/reward_score/math_dapo.py.
Code runs in the real local sandbox.

Expected values are what verl (volcengine/verl at 9886706) does with the same action,
worked out by hand from the cited lines (docs/retool.md has the table):

* tool output: ``verl/tools/sandbox_fusion_tools.py`` lines 179-189 (a finished run is
  ``stdout + stderr``; any other run one fixed text);
* bad calls: ``verl/experimental/agent_loop/tool_parser.py`` lines 87-106 (a block whose
  JSON or ``name``/``arguments`` cannot be read is skipped) and ``tool_agent_loop.py``
  lines 433-454 (an unknown tool or a missing ``code`` answers an error text), 256-261
  (no call left: the loop ends);
* budget: ``tool_agent_loop.py`` lines 229-238 and 363-364 (``response_mask`` counts the
  model's and the tools' tokens; the loop ends at ``>= response_length``), and
  ``vllm_async_server.py`` line 400 (each generation may use the rest);
* tool schema: ``recipe/retool/sandbox_fusion_tool_config.yaml`` lines 13-24.
"""

from __future__ import annotations

import itertools
import json

import pytest
import pytest_asyncio
from support import machine_skips
from support.preset_play import play_texts as play
from support.preset_play import tool_call as call
from support.retool_cli_helpers import AGENTENVS

from agentenvs.envs.registry import make
from agentenvs.envs.retool.protocol import code_action
from agentenvs.envs.retool.reward import dapo_last_boxed, strict_box_correct
from agentenvs.envs.retool.sandboxes import close_shared_sandboxes
from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.rollouts import do_single_rollout

pytestmark = machine_skips.needs(*machine_skips.LOCAL_SANDBOX)
in_module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module", autouse=True)
async def _close_sandboxes():
    yield
    await close_shared_sandboxes()


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
    assert env.task.last_output == "42\n"  # verl: stdout as the program wrote it
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


# ---- tool output, bad calls, the response budget: knob by knob ---------------------------


def test_preset_values_for_output_calls_and_budget():
    cfg = preset()
    assert cfg.tool_output == "verl" and cfg.call_rules == "verl"
    # run_qwen2_7b_dapo.sh: max_response_length=16384, one budget, no per-turn cap
    assert cfg.limits.max_response_tokens == 16384 and cfg.limits.max_tokens_per_turn is None
    default = make("retool")  # today's defaults are unchanged
    assert default.tool_output == "agentenvs" and default.call_rules == "agentenvs"
    assert default.limits.max_response_tokens is None


# ---- tool output -------------------------------------------------------------------------


@in_module_loop
async def test_output_is_stdout_then_stderr_as_they_are(tokenizer):
    code = "import sys\nsys.stderr.write('err\\n')\nprint('out')"  # stderr written first
    env = preset().make_env(0, tokenizer)
    await play(env, [call(code)])
    assert env.task.last_output == "out\nerr\n"  # stdout, then stderr, nothing between
    failing = "import sys\nprint('out')\nprint(sys.exit(3))"  # a run that finished, status 3
    env = preset().make_env(0, tokenizer)
    await play(env, [call(failing)])
    assert env.task.last_output == "out\n"
    mine = make("retool", protocol="tool_call").make_env(0, tokenizer)
    await play(mine, [call(code)])
    assert mine.task.last_output == "out"  # ours: stderr dropped on success


@in_module_loop
async def test_a_silent_program_returns_the_empty_string(tokenizer):
    silent = "x = 1\nprint(end='')"  # the last line starts with print: not wrapped
    env = preset().make_env(0, tokenizer)
    (result,) = await play(env, [call(silent)])
    assert env.task.last_output == ""
    assert "<|im_start|>tool\n<|im_end|>" in tokenizer.decode(result.next_observation)
    mine = make("retool", protocol="tool_call").make_env(0, tokenizer)
    await play(mine, [call(silent)])
    assert mine.task.last_output.startswith("(no output")


@in_module_loop
async def test_a_timeout_returns_the_one_timeout_text_and_it_is_settable(tokenizer):
    code = "import time\nprint('partial', flush=True)\ntime.sleep(30)"
    env = preset(timeout=1.0, strings={"timeout_output": "TIMED OUT"}).make_env(0, tokenizer)
    await play(env, [call(code)])
    assert env.task.last_output == "TIMED OUT"  # the partial stdout is not shown


# ---- bad calls ---------------------------------------------------------------------------


@in_module_loop
async def test_unparsable_calls_are_skipped_and_a_turn_without_calls_is_final(tokenizer):
    cfg = preset()
    answer = cfg.problems()[0].answer
    # Skipped: broken JSON, no "arguments"; the next readable call is the first (and runs).
    text = (
        "<tool_call>{not json}</tool_call>" + '<tool_call>{"name": "code_interpreter"}</tool_call>'
    )
    env = cfg.make_env(0, tokenizer)
    (result,) = await play(env, [text + call("print(7)")])
    assert not result.episode_done and env.task.last_output == "7\n"
    # Nothing readable: the agent loop ends there and the response is graded.
    (result,) = await play(
        cfg.make_env(0, tokenizer), [f"\\boxed{{{answer}}} <tool_call>{{oops</tool_call>"]
    )
    assert result.episode_done and result.reward == 1.0 and result.metrics["stop/completed"]
    mine = make("retool", protocol="tool_call", on_malformed="end")
    (result,) = await play(mine.make_env(0, tokenizer), ["<tool_call>{not json}</tool_call>"])
    assert result.episode_done and result.metrics["stop/parse_error"] == 1


@in_module_loop
async def test_an_unknown_tool_or_missing_code_is_answered_and_play_goes_on(tokenizer):
    cfg = preset(strings={"tool_error": "CALL FAILED: {error}"})
    env = cfg.make_env(0, tokenizer)
    unknown, missing, ran = await play(
        env, [call("print(1)", name="python"), call(None), call("print(2)")]
    )
    for result in (unknown, missing):
        assert not result.episode_done
        assert "CALL FAILED: " in tokenizer.decode(result.next_observation)
    assert "unknown tool 'python'" in tokenizer.decode(unknown.next_observation)
    assert not ran.episode_done and env.task.last_output == "2\n"
    assert env.task.tool_calls == 1 and env.task.tool_turns == 3


@in_module_loop
async def test_error_turns_count_as_tool_turns_in_the_shaping(tokenizer):
    # compute_score: min(-0.6, -1 + (num_turns - 2) / 2 * 0.1), num_turns counts user turns
    results = await play(
        preset().make_env(0, tokenizer), [call("1", name="nope"), "\\boxed{-12345}"]
    )
    assert results[-1].reward == pytest.approx(-0.9)


def test_the_tool_schema_descriptions_are_settable():
    cfg = preset(strings={"tool_description": "TOOL", "code_description": "CODE"})
    (tool,) = cfg.make_text_env(0).tools()
    assert tool["function"]["description"] == "TOOL"
    assert tool["function"]["parameters"]["properties"]["code"]["description"] == "CODE"


# ---- one response budget across the episode -------------------------------------------------


@in_module_loop
async def test_each_turn_may_use_what_is_left_of_the_budget(tokenizer):
    env = preset().make_env(0, tokenizer)
    ob, _ = await env.initial_observation()
    assert env.max_action_tokens() == 16384
    action = env.renderer.encode(call("print(6 * 7)")) + env.renderer.end_of_turn_tokens()
    result = await env.step(action, extra={"stop_reason": "eos"})
    observation = len(result.next_observation) - len(ob) - len(action)
    assert observation > 0  # the tool's tokens count too (verl's response_mask)
    assert env.max_action_tokens() == 16384 - len(action) - observation


@in_module_loop
async def test_a_turn_cut_by_the_budget_is_graded_not_a_flat_penalty(tokenizer):
    answer = make("retool").problems()[0].answer
    lead = "Let me think." * 10 + f" So \\boxed{{{answer}}}"
    text = lead + " and more words" * 100
    budget = len(tokenizer.encode(lead, add_special_tokens=False)) + 4
    cfg = preset(limits={"max_response_tokens": budget})
    env = cfg.make_env(0, tokenizer)
    await env.initial_observation()
    assert env.max_action_tokens() == budget
    tokens = env.renderer.encode(text)[:budget]  # the sampler stopped at the cap: "length"
    assert f"\\boxed{{{answer}}}" in tokenizer.decode(tokens)
    (result,) = [await env.step(tokens, extra={"stop_reason": "length"})]
    # No call in the cut text: the task grades it as the final turn, as verl's loop ends
    # on the spent budget and grades; the reward is the graded one, not a limit's.
    assert result.episode_done and result.metrics["stop/completed"] == 1
    assert result.reward == 1.0 and result.metrics["correct"] == 1
    # A budget cut is the budget's end, even where a per-turn cut would end the episode
    # (on_truncated_action=end, today's default): still graded.
    ours = make("retool", protocol="tool_call", limits={"max_response_tokens": budget})
    env = ours.make_env(0, tokenizer)
    await env.initial_observation()
    (result,) = [await env.step(tokens, extra={"stop_reason": "length"})]
    assert "stop/max_tokens" not in result.metrics and result.reward == 1.0
    # The old way, a per-turn cap of the same size: a flat wrong-answer reward.
    capped = make("retool", protocol="tool_call", limits={"max_tokens_per_turn": budget})
    env = capped.make_env(0, tokenizer)
    await env.initial_observation()
    (result,) = [await env.step(tokens, extra={"stop_reason": "length"})]
    assert result.metrics["stop/max_tokens"] == 1 and result.reward == -1.0


@in_module_loop
async def test_an_output_that_would_use_up_the_budget_is_not_shown_nor_graded(tokenizer):
    cfg = preset()
    answer = cfg.problems()[0].answer
    # The box is made by the program, so the model's own text (the call) holds none.
    code = f"print('x' * 200)\nprint(chr(92) + 'boxed{{' + str({int(answer) - 1} + 1) + '}}')"
    env = cfg.make_env(0, tokenizer)
    await env.initial_observation()
    action = env.renderer.encode(call(code)) + env.renderer.end_of_turn_tokens()
    env.limits = env.limits.model_copy(update={"max_response_tokens": len(action) + 20})
    result = await env.step(action, extra={"stop_reason": "eos"})
    assert result.episode_done and result.metrics["stop/response_budget"] == 1
    # Shown, the printed box would score under whole_response; it was never shown.
    assert result.metrics["correct"] == 0 and result.reward == -1.0
    roomy = cfg.make_env(0, tokenizer)
    await roomy.initial_observation()
    shown = await roomy.step(action, extra={"stop_reason": "eos"})
    assert f"boxed{{{answer}}}" in tokenizer.decode(shown.next_observation)
    (graded,) = [await roomy.step(roomy.renderer.encode("Done.") + roomy.renderer.end_of_turn_tokens(),
                                  extra={"stop_reason": "eos"})]  # fmt: skip
    assert graded.metrics["correct"] == 1  # the same output, shown, is graded


@in_module_loop
async def test_every_policy_is_asked_for_at_most_what_is_left(tokenizer):
    """Through the collector's turn loop: each turn's max_tokens is the budget's rest."""
    cfg = preset(limits={"max_response_tokens": 120})
    env = cfg.make_env(0, tokenizer)
    asked: list[int | None] = []

    class Talker:
        async def __call__(self, observation, stop, *, max_tokens=None):
            asked.append(max_tokens)
            tokens = env.renderer.encode(call("print(1)")) + env.renderer.end_of_turn_tokens()
            if max_tokens is not None and len(tokens) > max_tokens:
                return TokensWithLogprobs(tokens[:max_tokens], stop_reason="length")
            return TokensWithLogprobs(tokens, stop_reason="eos")

    trajectory = await do_single_rollout(Talker(), env)
    assert asked[0] == 120 and all(a > b for a, b in itertools.pairwise(asked))
    used = sum(len(t.ac.tokens) for t in trajectory.transitions)
    assert used <= 120 and trajectory.stop_reason == "response_budget"
