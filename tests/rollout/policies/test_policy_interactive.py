"""The interactive policy, with injected streams and through a real stdin pipe."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap

import pytest

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.rollout.collect.rollouts import do_group_rollout
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.policies.base import PolicyError


async def test_person_plays_guess_number_through_streams(tokenizer):
    config = GuessNumberConfig(tasks=1)
    secret = config.secret(0)
    wrong = secret + 1 if secret < config.high else secret - 1
    typed = io.StringIO(f"<guess>{wrong}</guess>\nno idea\n<guess>{secret}</guess>\n")
    shown = io.StringIO()
    policy = make_policy("interactive", tokenizer=tokenizer, input=typed, output=shown)
    group = await do_group_rollout(config.group_builder(0, 1, tokenizer), policy)
    (traj,) = group.trajectories
    assert traj.stop_reason == "completed" and group.total_rewards() == [pytest.approx(0.9)]

    first, second, _ = (t.ac for t in traj.transitions)
    # Ends on the env's stop string: kept as typed, no end-of-turn token added.
    assert first.stop_reason == "stop"
    assert first.tokens == tokenizer.encode(f"<guess>{wrong}</guess>", add_special_tokens=False)
    # No stop string: the end-of-turn token is appended, like a model's EOS.
    assert second.stop_reason == "eos" and second.tokens[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(second.tokens) == "no idea<|im_end|>"
    assert first.logprobs is None  # a person has no logprobs

    out = shown.getvalue()
    assert "I am thinking of a whole number" in out  # the prompt, decoded
    assert "go higher" in out or "go lower" in out  # the env's feedback
    assert "Write your guess as <guess>N</guess>." in out
    # Only the delta is shown: the prompt appears once.
    assert out.count("I am thinking of a whole number") == 1


async def test_end_of_input_is_a_policy_error(tokenizer):
    policy = make_policy(
        "interactive", tokenizer=tokenizer, input=io.StringIO(""), output=io.StringIO()
    )
    builder = GuessNumberConfig(tasks=1).group_builder(0, 1, tokenizer)
    with pytest.raises(PolicyError, match="interactive input ended"):
        await do_group_rollout(builder, policy)


def test_interactive_over_a_real_stdin_pipe(tmp_path):
    script = textwrap.dedent(
        """
        import asyncio, json
        from agentenvs.envs.guess_number import GuessNumberConfig
        from agentenvs.rollout.policies import make_policy
        from agentenvs.rollout.collect.rollouts import do_group_rollout
        from agentenvs.rollout.tokenizer import train_chatml_tokenizer

        tok = train_chatml_tokenizer()
        builder = GuessNumberConfig(tasks=1).group_builder(0, 1, tok)
        group = asyncio.run(do_group_rollout(builder, make_policy("interactive", tokenizer=tok)))
        traj = group.trajectories[0]
        print("RESULT " + json.dumps([traj.stop_reason, len(traj.transitions)]))
        """
    )
    secret = GuessNumberConfig(tasks=1).secret(0)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        input=f"<guess>0</guess>\n<guess>{secret}</guess>\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "go higher" in proc.stdout
    assert f"your action> <guess>{secret}</guess>" in proc.stdout  # piped input is echoed
    result = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    assert json.loads(result[len("RESULT ") :]) == ["completed", 2]
