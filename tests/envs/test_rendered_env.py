"""RenderedEnv limits: every way an episode can end records exactly one stop reason,
and nothing the model writes makes the env raise."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.interface_helpers import (
    THINK_STRIPPING_TEMPLATE,
    ScriptedTask,
    char_tokens,
    im_end,
    stop_keys,
)

import agentenvs.envs as envs
from agentenvs.envs.rendered_env import Limits, RenderedEnv
from agentenvs.envs.renderers import ChatRenderer, ContinuationRenderer, make_renderer
from agentenvs.envs.text import TextEnv, TextStep


def _env(tokenizer, task=None, renderer=ChatRenderer, **limits) -> RenderedEnv:
    task = task or ScriptedTask(observations=["obs"] * 20)
    return RenderedEnv(task, renderer(tokenizer), Limits(**limits))


def _action(tokenizer, text: str, eos: bool = True) -> list[int]:
    return [*char_tokens(tokenizer, text), *([im_end(tokenizer)] if eos else [])]


async def _play(env: RenderedEnv, actions, stop_reason="eos"):
    await env.initial_observation()
    results = []
    for action in actions:
        results.append(await env.step(action, extra={"stop_reason": stop_reason}))
        if results[-1].episode_done:
            break
    return results


def _assert_single_stop(results, reason: str) -> None:
    assert results[-1].episode_done
    assert stop_keys(results[-1].metrics) == [f"stop/{reason}"]
    assert results[-1].next_observation == []
    for r in results[:-1]:
        assert not r.episode_done and stop_keys(r.metrics) == []


async def test_completed(tokenizer) -> None:
    task = ScriptedTask(observations=["go on"])
    results = await _play(
        _env(tokenizer, task), [_action(tokenizer, "x"), _action(tokenizer, "FINAL")]
    )
    _assert_single_stop(results, "completed")
    assert results[-1].reward == 1.0 and results[-1].metrics["turns"] == 2
    assert task.closed == 1


async def test_max_turns(tokenizer) -> None:
    task = ScriptedTask(observations=["more"] * 10)
    env = _env(tokenizer, task, max_turns=3)
    results = await _play(env, [_action(tokenizer, "again")] * 10)
    assert len(results) == 3
    _assert_single_stop(results, "max_turns")
    assert results[-1].reward == 0.25  # the last turn's reward still counts
    assert task.closed == 1
    with pytest.raises(RuntimeError, match="single-use"):
        await env.step(_action(tokenizer, "again"))


async def test_max_tokens_per_turn(tokenizer) -> None:
    task = ScriptedTask(observations=["more"] * 5)
    env = _env(tokenizer, task, max_tokens_per_turn=5, truncation_reward=-1.0)
    results = await _play(env, [_action(tokenizer, "ok"), _action(tokenizer, "far too long")])
    _assert_single_stop(results, "max_tokens")
    assert results[-1].reward == -1.0
    assert [text for text, _ in task.seen] == ["ok"]  # the task never saw the overlong one


async def test_sampler_length_ends_the_episode(tokenizer) -> None:
    task = ScriptedTask(observations=["more"] * 5)
    results = await _play(
        _env(tokenizer, task), [_action(tokenizer, "cut off mid", eos=False)], "length"
    )
    _assert_single_stop(results, "max_tokens")
    assert task.seen == []


async def test_sampler_length_can_pass_to_the_task(tokenizer) -> None:
    task = ScriptedTask(observations=["more"] * 5)
    env = _env(tokenizer, task, on_truncated_action="pass")
    results = await _play(env, [_action(tokenizer, "cut off mid", eos=False)], "length")
    assert not results[-1].episode_done
    assert task.seen == [("cut off mid", "length")]


async def test_context_overflow_on_observation(tokenizer) -> None:
    long_observation = "word " * 200
    task = ScriptedTask(observations=[long_observation])
    env = _env(tokenizer, task)
    ob, _ = await env.initial_observation()
    action = _action(tokenizer, "ask")
    env.limits = Limits(max_trajectory_tokens=len(ob) + len(action) + 50)
    result = await env.step(action, extra={"stop_reason": "eos"})
    _assert_single_stop([result], "context_overflow")
    assert task.seen == [("ask", "eos")]


async def test_context_overflow_on_action(tokenizer) -> None:
    task = ScriptedTask(observations=["more"])
    env = _env(tokenizer, task)
    ob, _ = await env.initial_observation()
    action = _action(tokenizer, "a policy that ignored its token cap")
    env.limits = Limits(max_trajectory_tokens=len(ob) + len(action) - 1)
    result = await env.step(action, extra={"stop_reason": "eos"})
    _assert_single_stop([result], "context_overflow")
    assert task.seen == []


async def test_action_that_exactly_fills_the_budget_is_still_judged(tokenizer) -> None:
    """A final answer that fits the budget to the last token must be scored, not
    thrown away as an overflow."""
    task = ScriptedTask(observations=[])
    env = _env(tokenizer, task)
    ob, _ = await env.initial_observation()
    action = _action(tokenizer, "FINAL")
    env.limits = Limits(max_trajectory_tokens=len(ob) + len(action))
    result = await env.step(action, extra={"stop_reason": "eos"})
    _assert_single_stop([result], "completed")
    assert result.reward == 1.0


async def test_restart_that_overflows_ends_the_episode(tokenizer) -> None:

    from agentenvs.rollout.tokenizer import train_chatml_tokenizer

    tok = train_chatml_tokenizer(chat_template=THINK_STRIPPING_TEMPLATE)
    task = ScriptedTask(observations=["word " * 100])
    env = RenderedEnv(task, ChatRenderer(tok))
    ob, _ = await env.initial_observation()
    action = _action(tok, "<think>x</think>y")
    env.limits = Limits(max_trajectory_tokens=len(ob) + 60)
    result = await env.step(action, extra={"stop_reason": "eos"})
    _assert_single_stop([result], "context_overflow")
    assert result.metrics["renderer/prefix_breaks"] == 1


async def test_malformed_action_continues_with_a_hint(tokenizer) -> None:
    env = envs.make("guess_number", limits={"max_turns": 2}).make_env(0, tokenizer)
    results = await _play(env, [_action(tokenizer, "no idea")] * 2)
    assert results[0].metrics == {"invalid_actions": 1}
    assert results[0].reward == pytest.approx(-0.1)
    assert "Write your guess" in tokenizer.decode(results[0].next_observation)
    _assert_single_stop(results, "max_turns")


async def test_task_stop_reason_is_recorded(tokenizer) -> None:
    task = ScriptedTask(observations=[])  # any non-final action is a parse error
    results = await _play(_env(tokenizer, task), [_action(tokenizer, "???")])
    _assert_single_stop(results, "parse_error")


async def test_undecodable_bytes_do_not_raise(tokenizer) -> None:
    """Byte-level tokens that split a UTF-8 character decode to replacement characters."""
    broken = tokenizer.encode("日本", add_special_tokens=False)[:1]  # half a character
    env = envs.make("guess_number").make_env(0, tokenizer)
    results = await _play(env, [[*broken, im_end(tokenizer)]])
    assert not results[0].episode_done and results[0].metrics == {"invalid_actions": 1}


async def test_continuation_limits_too(tokenizer) -> None:
    task = ScriptedTask(observations=["\n<obs/>\n"] * 5)
    env = _env(tokenizer, task, renderer=ContinuationRenderer, max_turns=2)
    results = await _play(env, [_action(tokenizer, "<a>", eos=False)] * 5, "stop")
    _assert_single_stop(results, "max_turns")


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    actions=st.lists(
        st.tuples(
            st.lists(st.integers(0, 2047), min_size=0, max_size=40),
            st.sampled_from(["stop", "eos", "length"]),
        ),
        min_size=1,
        max_size=8,
    ),
    max_turns=st.integers(1, 6),
    per_turn=st.one_of(st.none(), st.integers(1, 30)),
    budget_slack=st.one_of(st.none(), st.integers(0, 200)),
    renderer=st.sampled_from([ChatRenderer, ContinuationRenderer]),
)
def test_random_token_actions_never_raise(
    tokenizer, actions, max_turns, per_turn, budget_slack, renderer
) -> None:
    """Whatever tokens a policy samples, the episode ends within max_turns with one stop
    reason, or is still running with none; the env never raises."""
    config = envs.make("guess_number")
    env = RenderedEnv(config.make_text_env(3), renderer(tokenizer), Limits(max_turns=max_turns))

    async def play():
        ob, _ = await env.initial_observation()
        env.limits = Limits(
            max_turns=max_turns,
            max_tokens_per_turn=per_turn,
            max_trajectory_tokens=None if budget_slack is None else len(ob) + budget_slack + 1,
        )
        results = []
        context = list(ob)
        for tokens, why in actions:
            result = await env.step(tokens, extra={"stop_reason": why})
            results.append(result)
            if result.episode_done:
                break
            assert result.next_observation[: len(context) + len(tokens)] == context + tokens
            context = list(result.next_observation)
        return results

    results = asyncio.run(play())
    assert len(results) <= max_turns
    for r in results[:-1]:
        assert not r.episode_done and stop_keys(r.metrics) == []
    last = results[-1]
    if last.episode_done:
        assert len(stop_keys(last.metrics)) == 1
        assert env.closed
    else:
        assert stop_keys(last.metrics) == [] and len(results) == len(actions) < max_turns


class _ScoresItsLimits(TextEnv):
    """Keeps asking for more; scores any limit ending like a wrong answer."""

    def __init__(self) -> None:
        self.limit_reasons: list[str] = []

    def initial_messages(self):
        return [{"role": "user", "content": "Say anything."}]

    async def step(self, action_text, *, stop_reason):
        return TextStep("x " * 40, metrics={"steps": 1})

    def on_limit(self, reason):
        self.limit_reasons.append(reason)
        return TextStep(reward=-1.0, metrics={"ended_by_limit": 1, "steps": 99})


@pytest.mark.parametrize(
    ("limits", "reason", "expected_reward"),
    [
        (Limits(max_turns=2), "max_turns", -1.0),
        (
            Limits(max_turns=9, max_trajectory_tokens=60, overflow_reward=-0.5),
            "context_overflow",
            -1.5,
        ),
        (Limits(max_tokens_per_turn=2, truncation_reward=-0.25), "max_tokens", -1.25),
    ],
)
async def test_limit_endings_are_scored_by_the_task(tokenizer, limits, reason, expected_reward):
    task = _ScoresItsLimits()
    env = RenderedEnv(task, make_renderer("chat", tokenizer), limits)
    await env.initial_observation()
    action = tokenizer.encode("ok then<|im_end|>", add_special_tokens=False)
    for _ in range(10):
        result = await env.step(action, extra={"stop_reason": "eos"})
        if result.episode_done:
            break
    assert result.episode_done
    assert task.limit_reasons == [reason]
    assert result.metrics[f"stop/{reason}"] == 1
    assert result.reward == pytest.approx(expected_reward)
    assert result.metrics["ended_by_limit"] == 1
    # The step's own metrics win over the ending's (the last step's report is kept).
    if reason == "max_turns":
        assert result.metrics["steps"] == 1
