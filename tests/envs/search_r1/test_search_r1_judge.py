"""Search-R1 takes the same ``judge`` field as ReTool: its episodes are judged on their
final step, its records name the judge among the reward components, and a config
without a judge dumps, hashes and builds exactly as before. Checked without a server
(the judge itself runs against real vLLM in tests/envs/rewards/)."""

from __future__ import annotations

from agentenvs.envs import make
from agentenvs.envs.rewards.identity import reward_components
from agentenvs.envs.rewards.judged_env import JudgedTextEnv, unwrap
from agentenvs.envs.search_r1.env import SearchR1Env
from agentenvs.envs.search_r1.reward import judge_input

SETTINGS = {"base_url": "http://127.0.0.1:9", "model": "j", "combine": "replace"}


def test_the_judge_field_wraps_the_episode_and_names_the_judge() -> None:
    config = make("search_r1", judge=SETTINGS)
    env = config.make_text_env(0)
    assert isinstance(env, JudgedTextEnv) and env.settings.combine == "replace"
    inner = unwrap(env)
    assert isinstance(inner, SearchR1Env) and env.task is inner.task
    names = [c.name for c in reward_components("search_r1", config.model_dump(mode="json"))]
    assert names == ["score", "final_step", "judge"]


def test_without_a_judge_nothing_changes() -> None:
    config = make("search_r1")
    assert isinstance(config.make_text_env(0), SearchR1Env)
    assert "judge" not in config.model_dump(mode="json")
    names = [c.name for c in reward_components("search_r1", config.model_dump(mode="json"))]
    assert names == ["score", "final_step"]


def test_the_judge_reads_the_question_the_models_text_and_the_golden_answers() -> None:
    env = make("search_r1").make_search_env(0)
    env.actions = ["<search>x</search>", "<answer>Paris</answer>"]
    item = judge_input(env)
    assert item.question == env.task.question
    assert item.response == "<search>x</search><answer>Paris</answer>"
    assert item.reference == " | ".join(env.task.golden_answers)
