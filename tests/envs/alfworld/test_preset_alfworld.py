"""preset=gigpo: each knob against verl-agent's ALFWorld setup, on the real engine.

Facts from langfengQ/verl-agent: env_package/alfworld/projection.py (alfworld_projection),
env_manager.py (AlfWorldEnvironmentManager.build_text_obs, reset/step 'anchor'),
memory/memory.py (SimpleMemory.fetch), the trainer's apply_invalid_action_penalty.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from agentenvs.envs import make
from agentenvs.envs.alfworld.env import NOTHING_HAPPENS, anchor_key
from agentenvs.envs.alfworld.games import SHIPPED_DATA, data_root

AGENTENVS = str(Path(sys.executable).parent / "agentenvs")
SMALL = "pick_and_place_simple-Apple-None-Fridge-kitchen7/trial_simple-apple-fridge"
THINK = "<think>hm</think>"


@pytest.fixture(scope="module")
def gigpo():
    cfg = make("alfworld", preset="gigpo", data="shipped")
    yield cfg
    cfg.shutdown()


async def play(cfg, tokenizer, texts, stop: str = "eos"):
    """Plays ``texts``; ``stop="length"`` sends each as the sampler's cut at the env's cap
    (the text's first ``max_action_tokens()`` tokens, no end-of-turn)."""
    index = [g.name for g in cfg.games()].index(SMALL)
    env = cfg.make_env(index, tokenizer)
    ob, _ = await env.initial_observation()
    results = []
    try:
        for text in texts:
            tokens = env.renderer.encode(text)
            if stop == "length":
                tokens = tokens[: env.max_action_tokens()]
            else:
                tokens += env.renderer.end_of_turn_tokens()
            results.append(await env.step(tokens, extra={"stop_reason": stop}))
            if results[-1].episode_done:
                break
    finally:
        await env.close()
    return env, ob, results


def test_preset_values(gigpo):
    assert gigpo.success_reward == 10 and gigpo.limits.max_turns == 50
    # run_alfworld.sh: data.max_response_length=512, data.max_prompt_length=2048
    assert gigpo.limits.max_tokens_per_turn == 512 and gigpo.limits.max_prompt_tokens == 2048
    assert gigpo.limits.on_truncated_action == "pass"
    default = make("alfworld")  # today's defaults are unchanged
    assert default.limits.on_truncated_action == "end" and default.limits.max_prompt_tokens is None
    assert gigpo.history == "window" and gigpo.history_window == 2
    assert gigpo.require_think and not gigpo.penalise_inadmissible
    assert make("alfworld").prompt_layout == "agentenvs"  # today's default is unchanged


async def test_one_user_message_with_the_raw_first_observation(gigpo, tokenizer):
    env, _ob, _ = await play(gigpo, tokenizer, [])
    (message,) = env.task.initial_messages()
    assert message["role"] == "user"
    assert message["content"].startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert "\n 'look'" in message["content"] and "'help'" not in message["content"]


async def test_format_penalty_only(gigpo, tokenizer):
    _, _, (no_think, inadmissible, fine) = await play(
        gigpo,
        tokenizer,
        [
            "<action>look</action>",
            THINK + "<action>fly</action>",
            THINK + "<action>look</action>",
        ],
    )
    assert no_think.reward == pytest.approx(-0.1) and no_think.metrics["invalid_format"] == 1
    assert inadmissible.reward == 0.0 and inadmissible.metrics["invalid_action"] == 1
    assert fine.reward == 0.0


async def test_no_action_sends_the_last_30_characters(gigpo, tokenizer):
    env, _, (result,) = await play(gigpo, tokenizer, [THINK + "I would rather look around."])
    assert result.reward == pytest.approx(-0.1) and result.logs["feedback"] == NOTHING_HAPPENS
    assert env.task.memory[-1][1] == (THINK + "I would rather look around.").lower()[-30:]


async def test_a_reply_cut_by_the_step_cap_is_projected_penalised_and_play_goes_on(
    gigpo, tokenizer
):
    # verl-agent's rollout_loop decodes the (cut) response and steps the env with it;
    # the projection finds no complete <action> block, plays the tail, pays 0.1.
    long_reply = THINK + "<action>look" + " and then I keep on thinking" * 200 + "</action>"
    env, _, results = await play(
        gigpo, tokenizer, [long_reply, THINK + "<action>look</action>"], "length"
    )
    cut, after = results
    assert len(env.renderer.encode(long_reply)) > 512  # the cap really cut it
    assert not cut.episode_done and cut.reward == pytest.approx(-0.1)
    assert cut.metrics["invalid_format"] == 1 and cut.logs["feedback"] == NOTHING_HAPPENS
    assert not after.episode_done
    # (same engine pool as the fixture's: its shutdown covers this config too)
    ended = make("alfworld", preset="gigpo", data="shipped", limits={"on_truncated_action": "end"})
    _, _, (stopped,) = await play(ended, tokenizer, [long_reply], "length")
    assert stopped.episode_done and stopped.metrics["stop/max_tokens"] == 1


async def test_a_prompt_over_the_prompt_cap_ends_the_episode(gigpo, tokenizer):
    look = THINK + "<action>look</action>"
    _, ob, (fits,) = await play(gigpo, tokenizer, [look])
    assert len(ob) <= 2048 and not fits.episode_done
    first, later = len(ob), len(fits.next_observation)
    assert later > first  # the windowed prompt grows with its history
    small = make(
        "alfworld", preset="gigpo", data="shipped", limits={"max_prompt_tokens": first - 1}
    )
    _, _, (result,) = await play(small, tokenizer, [look])
    assert result.episode_done and result.metrics["stop/context_overflow"] == 1
    # Each fresh (windowed) prompt is held to the cap too, not only the first one.
    tight = make("alfworld", preset="gigpo", data="shipped", limits={"max_prompt_tokens": first})
    _, _, (step,) = await play(tight, tokenizer, [look])
    assert step.episode_done and step.metrics["stop/context_overflow"] == 1


async def test_first_action_lowercased_and_sent_as_is(gigpo, tokenizer):
    env, _, (first, spaced) = await play(
        gigpo,
        tokenizer,
        [
            THINK + "<action>LOOK</action><action>inventory</action>",
            THINK + "<action>look.</action>",
        ],
    )
    assert env.task.stats.actions[0] == "look" and first.logs["feedback"] != NOTHING_HAPPENS
    assert spaced.logs["feedback"] == NOTHING_HAPPENS  # no forgiving normalisation


async def test_the_whole_reply_is_sampled_and_its_first_action_played(gigpo, tokenizer):
    """verl-agent samples each step without a stop string, to EOS or the 512 cap
    (agent_system/multi_turn_rollout/rollout_loop.py:346, no stop in its sampling), and
    projects the decoded reply (projection.py:35-44); our default stops at </action>."""
    index = [g.name for g in gigpo.games()].index(SMALL)
    ours = make("alfworld", data="shipped").make_env(index, tokenizer)
    theirs = gigpo.make_env(index, tokenizer)
    try:
        _, stop_ours = await ours.initial_observation()
        _, stop_theirs = await theirs.initial_observation()
        assert "</action>" in stop_ours and "</action>" not in stop_theirs
        reply = (
            THINK + "<action>look</action> then I will open the fridge <action>inventory</action>"
        )
        tokens = theirs.renderer.encode(reply) + theirs.renderer.end_of_turn_tokens()
        step = await theirs.step(tokens, extra={"stop_reason": "eos"})
        assert theirs.task.stats.actions == ["look"] and step.reward == 0.0  # well formed
    finally:
        await ours.close()
        await theirs.close()


async def test_history_window_scrolls_the_start_out(gigpo, tokenizer):
    texts = [THINK + "<action>look</action>"] * 3
    _, _, results = await play(gigpo, tokenizer, texts)
    text = tokenizer.decode(results[-1].next_observation)
    assert "Welcome to TextWorld" not in text
    assert "[Observation 2: '" in text and "[Observation 3: '" in text
    assert "[Observation 1: '" not in text


async def test_each_step_logs_its_anchor_state(gigpo, tokenizer):
    env, _, (first, second) = await play(gigpo, tokenizer, [THINK + "<action>look</action>"] * 2)
    assert first.logs["anchor"] == env.task.first_feedback
    assert first.logs["anchor_key"] == anchor_key(env.task.first_feedback)
    assert second.logs["anchor"] == first.logs["feedback"]


def test_data_auto_uses_alfworlds_default_folder(monkeypatch, tmp_path, caplog):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with caplog.at_level(logging.WARNING):
        assert data_root("auto") == SHIPPED_DATA
    assert "shipped with agentenvs are played" in caplog.text
    home = tmp_path / ".cache" / "alfworld"
    home.mkdir(parents=True)
    (home / "json_2.1.1").symlink_to(SHIPPED_DATA)
    assert data_root("auto") == home / "json_2.1.1"


def test_a_split_folder_says_what_to_pass():
    with pytest.raises(ValueError, match="is the 'train' split itself; pass the folder above"):
        data_root(str(SHIPPED_DATA / "train"))


def test_rollout_cli_runs_the_preset_with_the_oracle(tmp_path):
    out = tmp_path / "alf.jsonl"
    command = [AGENTENVS, "rollout", "alfworld", "--set", "preset=gigpo", "--set", "data=shipped",
               "--groups", "2", "--group-size", "2", "--out", str(out), "--json-summary",
               "--no-progress"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["failed"] == 0 and summary["mean_reward"] == 10.0
    record = json.loads(out.read_text().splitlines()[0])
    assert "anchor_key" in json.dumps(record)


async def test_our_texts_come_from_a_strings_file(tmp_path, tokenizer):
    path = tmp_path / "alfworld.toml"
    path.write_text(
        'system_prompt = "MY SYSTEM"\nformat_hint = "MY HINT"\ntool_description = "MY TOOL"\n'
    )
    cfg = make("alfworld", data="shipped", strings_file=str(path))  # the agentenvs layout
    env, _, (result,) = await play(cfg, tokenizer, ["no action here"])
    assert env.task.initial_messages()[0] == {"role": "system", "content": "MY SYSTEM"}
    assert "MY HINT" in tokenizer.decode(result.next_observation)
    tool = make("alfworld", data="shipped", protocol="tool", strings_file=str(path))
    assert tool.make_text_env(0).tools()[0]["function"]["description"] == "MY TOOL"
    templates = tmp_path / "templates.yaml"
    templates.write_text("first_prompt_template: 'FIRST {current_observation}'\n")
    gigpo = make("alfworld", preset="gigpo", data="shipped", strings_file=str(templates))
    env, _, _ = await play(gigpo, tokenizer, [])
    assert env.task.initial_messages()[0]["content"].startswith("FIRST -= Welcome")
