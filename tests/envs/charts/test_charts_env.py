"""The charts environment: generated charts, zoom calls answered with pictures, exact reward."""

from __future__ import annotations

import asyncio

import gymnasium
import pytest
from support.vocab import shared_vocabulary

from agentenvs.envs import make
from agentenvs.envs.charts.charts import draw_chart, make_chart, zoom
from agentenvs.envs.charts.env import ChartsEnv
from agentenvs.envs.vision.images import pixel_hash

SEEDS = [f"0/train/{i}" for i in range(40)]


def test_charts_are_seeded_and_the_tallest_bar_is_clear():
    for seed in SEEDS:
        chart = make_chart(seed)
        assert chart == make_chart(seed)
        ordered = sorted(chart.values)
        assert ordered[-1] - ordered[-2] >= 6
        assert chart.answer() == sum(chart.value(b) for b in chart.needed())
    assert {make_chart(s).kind for s in SEEDS} == {"value", "tallest", "sum"}
    chart = make_chart(SEEDS[0])
    assert pixel_hash(draw_chart(chart)) == pixel_hash(draw_chart(make_chart(SEEDS[0])))
    crops = {pixel_hash(zoom(chart, b)) for b in chart.labels}
    assert len(crops) == len(chart.labels)  # each bar's crop is its own picture


def play(env: ChartsEnv, actions: list[str]):
    return [asyncio.run(env.step(a, stop_reason="stop")) for a in actions]


def test_the_oracle_zooms_then_answers_exactly():
    for seed in SEEDS[:12]:
        chart = make_chart(seed)
        env = ChartsEnv(chart, max_zooms=4)
        steps = []
        while not (steps and steps[-1].done):
            steps += play(env, [env.scripted_action()])
        assert steps[-1].reward == 1.0 and steps[-1].stop_reason == "completed"
        assert env.zoomed == list(chart.needed())
        for step in steps[:-1]:
            assert step.observation["role"] == "tool"
            assert step.observation["content"][1]["type"] == "image"


def test_wrong_malformed_and_impossible_calls_are_answered_not_raised():
    chart = make_chart(SEEDS[1])
    wrong = play(ChartsEnv(chart, 1), [f"<answer>{chart.answer() + 1}</answer>"])[0]
    assert wrong.done and wrong.reward == 0.0
    env = ChartsEnv(chart, max_zooms=1)
    malformed, unknown, ok, over = play(
        env,
        [
            env.scripted_action("malformed"),
            '<tool_call>{"name": "zoom", "arguments": {"bar": "Z"}}</tool_call>',
            env.scripted_action(),
            '<tool_call>{"name": "zoom", "arguments": {"bar": "A"}}</tool_call>',
        ],
    )
    assert not malformed.done and malformed.metrics["invalid_actions"] == 1
    assert "could not be read" in malformed.observation["content"]
    assert "no bar 'Z'" in unknown.observation["content"]
    assert ok.observation["content"][1]["type"] == "image"
    assert over.observation == {"role": "tool", "content": "No zooms left: answer now."}


def test_registered_with_gymnasium_and_forkable():
    config = make("charts", tasks=3)
    assert config.num_tasks() == 3
    env = gymnasium.make("agentenvs/Charts-v0")
    obs, _ = env.reset(seed=0)
    assert obs.startswith("<image>What is")
    text_env = config.make_text_env(0)
    text_env.zoomed.append("A")
    fork = asyncio.run(text_env.fork())
    fork.zoomed.append("B")
    assert text_env.zoomed == ["A"] and fork.chart is text_env.chart


@pytest.mark.parametrize("renderer", ["chat", "continuation"])
def test_scripted_collection_stores_images_once_and_passes_check(tmp_path, renderer):
    from support.vision_runs import collect_charts

    from agentenvs.rollout.collect.image_files import images_dir
    from agentenvs.rollout.inspect.check import check_file
    from agentenvs.rollout.policies import make_policy

    store = tmp_path / "charts.jsonl"
    result = collect_charts(make_policy("scripted"), store, renderer=renderer)
    assert not result.failed and all(r.group.total_rewards() == [1.0, 1.0] for r in result.ok)
    shown = {p.image.sha256 for r in result.ok for t in r.group.trajectories
             for tr in t.transitions for p in tr.images}  # fmt: skip
    assert sorted(p.stem for p in images_dir(store).rglob("*.png")) == sorted(shown)
    assert "data:image" not in store.read_text()  # by reference, never inline
    report = check_file(store, tokenizer=shared_vocabulary("qwen2.5"))
    assert report.ok, [f for f in report.findings if f.status == "fail"]
    assert any("image placements" in f.detail for f in report.findings)
