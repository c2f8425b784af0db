"""The ReTool environment end to end through the real local sandbox.

Scripted policies (oracle, wrong, hostile, malformed) and hand-written actions
drive RenderedEnv episodes under both protocols; rewards, stop reasons and the
token layout (interpreter output is environment tokens, masked from the loss)
are asserted. All tests of this module share one event loop, hence one shared
sandbox pool, closed when the module ends.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass

import pytest
import pytest_asyncio
from support import machine_skips

from agentenvs.envs.errors import is_transient
from agentenvs.envs.registry import make
from agentenvs.envs.rendered_env import RenderedEnv
from agentenvs.envs.retool.config import ReToolConfig
from agentenvs.envs.retool.env import HOSTILE_SNIPPETS, ReToolEnv, SandboxFailure
from agentenvs.envs.retool.protocol import code_action, interpreter_block
from agentenvs.envs.retool.sandboxes import (
    close_shared_sandboxes,
    open_sandbox_count,
    shared_sandbox,
)
from agentenvs.envs.types import StepResult
from agentenvs.sandbox.base import SandboxUnavailable
from agentenvs.sandbox.pool.worker import children_of, process_name

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    machine_skips.needs(*machine_skips.LOCAL_SANDBOX),
]


@pytest_asyncio.fixture(loop_scope="module", scope="module", autouse=True)
async def _close_sandboxes_after_module():
    yield
    await close_shared_sandboxes()


# ---- helpers ------------------------------------------------------------------------
@dataclass
class Turn:
    ob: list[int]
    action: list[int]
    sampler_stop: str
    result: StepResult


def encode_action(env: RenderedEnv, text: str) -> tuple[list[int], str]:
    """Tokens of ``text`` ended the way a sampler ends a turn (stop sequence or EOS)."""
    tokens = env.renderer.encode(text)
    if any(text.endswith(stop) for stop in env.stop_condition() if stop):
        return tokens, "stop"
    return tokens + env.renderer.end_of_turn_tokens(), "eos"


async def drive(env: RenderedEnv, script: str | list[str], max_steps: int = 30) -> list[Turn]:
    """One episode; ``script`` is a scripted variant name or a list of action texts."""
    ob, _ = await env.initial_observation()
    turns: list[Turn] = []
    for index in range(max_steps):
        if isinstance(script, str):
            scripted = env.scripted_action(script)
            assert scripted is not None
            tokens, stop = scripted
        else:
            tokens, stop = encode_action(env, script[index])
        result = await env.step(tokens, extra={"stop_reason": stop})  # type: ignore[typeddict-item]
        turns.append(Turn(list(ob), list(tokens), stop, result))
        if result.episode_done:
            return turns
        # Token-in/token-out: the next context extends what the policy saw and sampled.
        assert result.next_observation[: len(ob) + len(tokens)] == ob + tokens
        ob = result.next_observation
    raise AssertionError(f"episode did not end within {max_steps} steps")


def appended(env: RenderedEnv, turn: Turn) -> str:
    """The environment's tokens after an action, decoded."""
    return env.renderer.decode(turn.result.next_observation[len(turn.ob) + len(turn.action) :])


def total_reward(turns: list[Turn]) -> float:
    return sum(t.result.reward for t in turns)


def stop_reason(turns: list[Turn]) -> str:
    final = turns[-1].result.metrics
    reasons = [k.split("/", 1)[1] for k, v in final.items() if k.startswith("stop/") and v]
    assert len(reasons) == 1, final
    return reasons[0]


def task(env: RenderedEnv) -> ReToolEnv:
    assert isinstance(env.task, ReToolEnv)
    return env.task


def index_of(config: ReToolConfig, problem_id: str) -> int:
    return next(i for i, p in enumerate(config.problems()) if p.id == problem_id)


# ---- the oracle, both protocols -----------------------------------------------------
async def test_oracle_solves_through_the_retool_protocol(tokenizer):
    config = make("retool")
    for problem_id in ("bigint-digit-sum-2-1000", "sum-telescoping-100", "linsys-4x4-fraction"):
        env = config.make_env(index_of(config, problem_id), tokenizer)
        answer = task(env).problem.answer
        turns = await drive(env, "oracle")
        assert [t.sampler_stop for t in turns] == ["stop", "eos"]
        assert stop_reason(turns) == "completed"
        assert total_reward(turns) == 1.0
        assert turns[-1].result.metrics["correct"] == 1
        assert turns[-1].result.metrics["tool_calls"] == 1
        # The action stops on </code>; the interpreter block is environment tokens.
        action_text = env.renderer.decode(turns[0].action)
        assert action_text.endswith("</code>") and "<interpreter>" not in action_text
        assert appended(env, turns[0]) == interpreter_block(answer)


async def test_interpreter_tokens_are_masked_from_the_loss(tokenizer):
    from agentenvs.rollout.collect.rollouts import do_single_rollout
    from agentenvs.rollout.data.samples import trajectory_to_samples
    from agentenvs.rollout.policies import make_policy

    config = make("retool")
    env = config.make_env(index_of(config, "mod-7-2024-mod-1000"), tokenizer)
    policy = make_policy("scripted")(env)  # type: ignore[call-arg, operator]
    trajectory = await do_single_rollout(policy, env)
    assert trajectory.stop_reason == "completed"
    (sample,) = trajectory_to_samples(trajectory, advantage=1.0)
    trained = [t for t, m in zip(sample.tokens, sample.loss_mask, strict=True) if m]
    assert trained == [tok for tr in trajectory.transitions for tok in tr.ac.tokens]
    masked_after_prompt = [
        t
        for t, m in zip(
            sample.tokens[sample.prompt_length :],
            sample.loss_mask[sample.prompt_length :],
            strict=True,
        )
        if not m
    ]
    assert tokenizer.decode(masked_after_prompt) == interpreter_block("401")


async def test_oracle_solves_through_tool_calls(tokenizer):
    config = make("retool", protocol="tool_call")
    env = config.make_env(index_of(config, "comb-partitions-50"), tokenizer)
    ob, stop = await env.initial_observation()
    prompt = tokenizer.decode(ob)
    # The tool spec reached the chat template.
    assert "code_interpreter" in prompt and "<tools>" in prompt
    assert "</code>" not in stop
    turns = await drive(env, "oracle")
    assert stop_reason(turns) == "completed" and total_reward(turns) == 1.0
    assert [t.sampler_stop for t in turns] == ["eos", "eos"]
    assert (
        appended(env, turns[0]) == "\n<|im_start|>tool\n204226<|im_end|>\n<|im_start|>assistant\n"
    )


# ---- wrong, hostile, malformed ------------------------------------------------------
async def test_wrong_answers_and_reward_settings(tokenizer):
    index = index_of(make("retool"), "prime-2024th")
    plain = await drive(make("retool").make_env(index, tokenizer), "wrong")
    assert stop_reason(plain) == "completed" and total_reward(plain) == -1.0
    assert (
        plain[-1].result.metrics["correct"] == 0 and plain[-1].result.logs["predicted"] == "17600"
    )
    zero_one = await drive(make("retool", incorrect_reward=0.0).make_env(index, tokenizer), "wrong")
    assert total_reward(zero_one) == 0.0
    shaped = await drive(make("retool", tool_shaping=True).make_env(index, tokenizer), "wrong")
    assert total_reward(shaped) == pytest.approx(-0.9)
    strict = await drive(make("retool", grader="strict_box").make_env(index, tokenizer), "oracle")
    assert total_reward(strict) == 1.0


async def test_hostile_code_is_contained_and_the_episode_ends_normally(tokenizer):
    config = make("retool", timeout=1.5)
    env = config.make_env(0, tokenizer)
    turns = await drive(env, "hostile")
    assert stop_reason(turns) == "completed" and total_reward(turns) == -1.0
    outputs = [appended(env, t) for t in turns[:-1]]
    assert len(outputs) == len(HOSTILE_SNIPPETS)
    assert "TimeoutError" in outputs[0]  # endless loop
    assert "Error" in outputs[1]  # fork bomb: killed by the timeout or the process limit
    assert "Error" in outputs[2] and "root:" not in outputs[2]  # /etc/shadow is not readable
    assert outputs[3].count("A") <= 400 and "..." in outputs[3]  # flood cut to head+tail
    metrics = turns[-1].result.metrics
    assert metrics["tool_calls"] == len(HOSTILE_SNIPPETS) and metrics["output_truncations"] >= 1
    # The shared sandbox is unharmed: the next episode still solves its problem.
    again = await drive(config.make_env(0, tokenizer), "oracle")
    assert total_reward(again) == 1.0


@pytest.mark.parametrize("protocol", ["retool", "tool_call"])
async def test_malformed_actions_continue_with_feedback_and_penalty(tokenizer, protocol):
    config = make("retool", protocol=protocol, malformed_penalty=-0.1, no_answer_penalty=-0.5)
    env = config.make_env(0, tokenizer)
    turns = await drive(env, "malformed")
    assert len(turns) == 3
    assert stop_reason(turns) == "no_answer"
    assert "Error: " in appended(env, turns[0]) and "Error: " in appended(env, turns[1])
    assert turns[-1].result.metrics["malformed_actions"] == 2
    assert turns[-1].result.metrics["tool_calls"] == 0
    assert total_reward(turns) == pytest.approx(-0.1 - 0.1 - 1.0 - 0.5)


async def test_malformed_actions_can_end_the_episode(tokenizer):
    env = make("retool", on_malformed="end").make_env(0, tokenizer)
    turns = await drive(env, "malformed")
    assert len(turns) == 1 and stop_reason(turns) == "empty_code" and total_reward(turns) == -1.0
    env = make("retool", protocol="tool_call", on_malformed="end").make_env(0, tokenizer)
    turns = await drive(env, ["<tool_call>\n{broken\n</tool_call>"])
    assert stop_reason(turns) == "parse_error"


async def test_no_answer_can_be_nudged_to_continue(tokenizer):
    config = make("retool", on_no_answer="continue")
    env = config.make_env(index_of(config, "mod-7-2024-mod-1000"), tokenizer)
    turns = await drive(env, ["Hmm, let me think.", "<answer>\\boxed{401}</answer>"])
    assert "No final answer" in appended(env, turns[0])
    assert stop_reason(turns) == "completed" and total_reward(turns) == 1.0


# ---- limits ---------------------------------------------------------------------------
async def test_max_tool_calls_ends_or_refuses(tokenizer):
    code = code_action("print(1)")
    ended = await drive(make("retool", max_tool_calls=1).make_env(0, tokenizer), [code, code])
    assert stop_reason(ended) == "max_tool_calls" and total_reward(ended) == -1.0
    assert ended[-1].result.metrics["tool_calls"] == 1

    config = make("retool", max_tool_calls=1, on_max_tool_calls="refuse")
    env = config.make_env(index_of(config, "mod-7-2024-mod-1000"), tokenizer)
    refused = await drive(env, [code, code, "<answer>\\boxed{401}</answer>"])
    assert "may not be used again" in appended(env, refused[1])
    assert stop_reason(refused) == "completed" and total_reward(refused) == 1.0


async def test_last_turn_does_not_run_code(tokenizer):
    config = make("retool", limits={"max_turns": 2})
    code = code_action("print(1)")
    turns = await drive(config.make_env(0, tokenizer), [code, code])
    assert stop_reason(turns) == "max_turns" and total_reward(turns) == -1.0
    assert turns[-1].result.metrics["tool_calls"] == 1


async def test_token_budget_and_truncated_actions(tokenizer):
    tight = make("retool", limits={"max_trajectory_tokens": 400})
    env = tight.make_env(0, tokenizer)
    flood = code_action("print('word ' * 300)")
    turns = await drive(env, [flood, flood, flood])
    assert stop_reason(turns) == "context_overflow"
    # Overflowing the context scores like a wrong answer, never better.
    assert total_reward(turns) == -1.0
    assert turns[-1].result.metrics["tool_calls"] >= 1
    assert turns[-1].result.metrics["correct"] == 0
    cut = make("retool", limits={"max_tokens_per_turn": 5})
    turns = await drive(cut.make_env(0, tokenizer), [code_action("print(1)")])
    assert stop_reason(turns) == "max_tokens" and total_reward(turns) == -1.0


# ---- execution semantics and output ---------------------------------------------------
async def test_stateful_sessions_keep_variables_and_stateless_runs_do_not(tokenizer):
    define, use = code_action("x = 41"), code_action("print(x + 1)")
    env = make("retool", execution="stateful").make_env(0, tokenizer)
    turns = await drive(env, [define, use, "\\boxed{0}"])
    assert appended(env, turns[1]) == interpreter_block("42")
    env = make("retool").make_env(0, tokenizer)
    turns = await drive(env, [define, use, "\\boxed{0}"])
    assert "NameError: name 'x' is not defined" in appended(env, turns[1])


async def test_errors_as_last_line_or_full_traceback(tokenizer):
    crash = code_action("print('before')\n1 / 0")
    env = make("retool").make_env(0, tokenizer)
    turns = await drive(env, [crash, "\\boxed{0}"])
    assert appended(env, turns[0]) == interpreter_block(
        "before\nZeroDivisionError: division by zero"
    )
    env = make("retool", error_detail="traceback").make_env(0, tokenizer)
    turns = await drive(env, [crash, "\\boxed{0}"])
    shown = appended(env, turns[0])
    assert "Traceback (most recent call last)" in shown and shown.rstrip().endswith(
        "ZeroDivisionError: division by zero\n</interpreter>"
    )


async def test_per_call_memory_limit_and_exit_codes(tokenizer):
    env = make("retool", memory_limit_mb=256).make_env(0, tokenizer)
    hog = code_action("a = bytearray(600 * 1024 * 1024)\nprint(len(a))")
    turns = await drive(env, [hog, code_action("import sys\nsys.exit(3)"), "\\boxed{0}"])
    assert appended(env, turns[0]) == interpreter_block(
        "MemoryError: the code exceeded the memory limit"
    )
    assert "3" in appended(env, turns[1])
    assert turns[-1].result.metrics["exec/memory"] == 1
    assert turns[-1].result.metrics["exec/error"] == 1


async def test_truncation_policies_on_real_output(tokenizer):
    program = "print(''.join(chr(97 + i % 26) for i in range(1000)))"
    text = "".join(chr(97 + i % 26) for i in range(1000))
    env = make("retool").make_env(0, tokenizer)
    turns = await drive(env, [code_action(program), "\\boxed{0}"])
    assert appended(env, turns[0]) == interpreter_block(text[:200] + "..." + text[-200:])

    env = make("retool", protocol="tool_call").make_env(0, tokenizer)
    turns = await drive(env, [code_action(program, protocol="tool_call"), "\\boxed{0}"])
    assert text[:128] + "...(truncated)..." + text[-128:] in appended(env, turns[0])

    env = make("retool", truncation="tokens", max_output_tokens=32).make_env(0, tokenizer)
    turns = await drive(env, [code_action(program), "\\boxed{0}"])
    shown = appended(env, turns[0])
    assert "...(truncated)..." in shown and len(shown) < 300


# ---- groups, the collector, sandbox selection --------------------------------
async def test_group_rollout_reports_pass_at_k_and_tool_use(tokenizer):
    from agentenvs.rollout.collect.rollouts import do_group_rollout
    from agentenvs.rollout.policies import make_policy

    config = make("retool")
    await drive(config.make_env(0, tokenizer), "oracle")  # the shared sandbox exists
    sandboxes_before = open_sandbox_count()
    builder = config.group_builder(index_of(config, "comb-coins-200"), 4, tokenizer)
    group = await do_group_rollout(builder, make_policy("scripted"))
    assert group.total_rewards() == [1.0] * 4
    assert group.group_rewards == [0.0] * 4
    assert group.group_metrics[0] == {
        "pass@1": 1.0,
        "pass@4": 1.0,
        "tool_use_rate": 1.0,
        "mean_tool_calls": 1.0,
    }
    assert [t.stop_reason for t in group.trajectories] == ["completed"] * 4
    wrong = await do_group_rollout(
        config.group_builder(0, 2, tokenizer), make_policy("scripted", variant="wrong")
    )
    assert wrong.group_metrics[0]["pass@1"] == 0.0 and wrong.total_rewards() == [-1.0, -1.0]
    # Every episode borrowed the one shared sandbox; none started its own.
    assert open_sandbox_count() == sandboxes_before


async def test_builders_pickle_without_live_state(tokenizer):
    import pickle

    config = make("retool")
    builder = config.group_builder(0, 2, tokenizer)
    await builder.make_envs()
    clone = pickle.loads(pickle.dumps(builder))
    assert clone.envs == [] and clone.config == config
    await builder.cleanup()


async def test_sandbox_backend_is_chosen_by_config():
    config = make("retool", sandbox={"backend": "sandboxfusion", "url": "http://127.0.0.1:9"})
    assert config.sandbox.backend == "sandboxfusion"
    assert make("retool", sandbox={"backend": "docker"}).sandbox.backend == "docker"


async def test_a_dead_sandbox_server_raises_instead_of_scoring(tokenizer):
    # A SandboxFusion URL where nothing listens: the run must fail loudly (the
    # collector retries the group), never become a -1 the model did not earn.
    config = make(
        "retool",
        sandbox={"backend": "sandboxfusion", "url": "http://127.0.0.1:9", "retries": 0},
        sandbox_retries=0,
        timeout=2,
    )
    env = config.make_env(0, tokenizer)
    await env.initial_observation()
    tokens, stop = encode_action(env, code_action("print(1)"))
    with pytest.raises((SandboxFailure, SandboxUnavailable)):
        await asyncio.wait_for(env.step(tokens, extra={"stop_reason": stop}), timeout=60)


# ---- the shipped problems ---------------------------------------------------------------
async def test_every_shipped_answer_is_verified_in_the_sandbox(tokenizer):
    """Each problem's oracle episode earns +1, and its independent check program
    prints the same answer, both through the real sandbox."""
    from agentenvs.envs.retool.sandboxes import shared_sandbox

    config = make("retool", timeout=30)
    sandbox = await shared_sandbox(config.sandbox)
    problems = config.problems()

    async def verify(index: int) -> None:
        problem = problems[index]
        turns = await drive(config.make_env(index, tokenizer), "oracle")
        assert total_reward(turns) == 1.0, (problem.id, turns[-1].result.logs)
        checked = await sandbox.run(problem.check or "", timeout=30)
        assert checked.ok, (problem.id, checked)
        assert checked.stdout.strip().splitlines()[-1] == problem.answer, problem.id

    semaphore = asyncio.Semaphore(4)

    async def bounded(index: int) -> None:
        async with semaphore:
            await verify(index)

    await asyncio.gather(*(bounded(i) for i in range(len(problems))))


# ---- a sandbox that dies is not the model's doing (issue 46) ------------------------------
# ReTool tells a program that crashed (the model's: it reads the crash and the episode goes
# on) from a sandbox worker that died under it (the infrastructure's: SandboxFailure,
# transient, so the collector retries the group and never scores the model on it). The
# worker is the real local sandbox's, SIGKILLed while the model's program runs.
async def play(env: RenderedEnv, code: str, observation: list[int]) -> tuple[str, list[int]]:
    """One code action; the interpreter's answer as text and the next observation."""
    tokens = env.renderer.encode(code_action(code))
    stop = (
        "stop" if any(code_action(code).endswith(s) for s in env.stop_condition() if s) else "eos"
    )
    if stop == "eos":
        tokens += env.renderer.end_of_turn_tokens()
    result = await env.step(tokens, extra={"stop_reason": stop})
    assert not result.episode_done
    start = len(observation) + len(tokens)
    return env.renderer.decode(result.next_observation[start:]), result.next_observation


def descendants(pid: int) -> list[int]:
    return [d for child in children_of(pid) for d in (child, *descendants(child))]


@pytest.mark.parametrize("execution", ["stateless", "stateful"])
async def test_a_crashed_program_is_read_and_a_killed_worker_is_a_sandbox_failure(
    execution, tokenizer
):
    config = make("retool", execution=execution, sandbox_retries=0, timeout=30)
    env = config.make_env(0, tokenizer)
    observation, _ = await env.initial_observation()
    crash = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    answer, observation = await play(env, crash, observation)
    assert "killed by signal SIGSEGV" in answer  # the model's program: shown, not raised

    sandbox = await shared_sandbox(config.sandbox)
    running = asyncio.ensure_future(play(env, "import time; time.sleep(25)", observation))
    deadline = time.monotonic() + 30
    while not any(process_name(p) == "python3" for w in sandbox.host_pids()
                  for p in (w, *descendants(w))):  # fmt: skip
        assert time.monotonic() < deadline, "the program never started in a worker"
        await asyncio.sleep(0.05)
    for pid in sandbox.host_pids():
        if process_name(pid) == "bwrap":
            os.kill(pid, signal.SIGKILL)
    with pytest.raises(SandboxFailure) as raised:
        await asyncio.wait_for(running, timeout=60)
    assert is_transient(raised.value)
    await env.close()
