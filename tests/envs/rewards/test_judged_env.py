"""A judged environment end to end: real collection, real vLLM judge, stored verdicts, check.

guess_number with a judge on its final step (the scripted oracle solves each game),
collected into a store as any run is: each final step carries the verdict's status,
raw text, score, model and prompt hash, the reward includes the judged part, and
``agentenvs check`` passes. The same run with a judge whose answers hold no score
stores failed verdicts, and check fails naming the first one. ReTool's config
wiring (``judge=...``) is checked without a server.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import ClassVar

import pytest
from support.judge_proxy import JudgeProxy
from support.vllm_server import SERVED_NAME, vllm_server  # noqa: F401 (the fixture)

from agentenvs.envs import catalogue, make, registry
from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.references import Registry
from agentenvs.envs.rewards.identity import RewardIdentity, recorded_components
from agentenvs.envs.rewards.judge import JudgeInput, judge_identity
from agentenvs.envs.rewards.judge_cache import clear_memory_cache
from agentenvs.envs.rewards.judge_settings import JudgeSettings
from agentenvs.envs.rewards.judged_env import JudgedTextEnv, judged, unwrap
from agentenvs.envs.text import TextEnv
from agentenvs.envs.types import Trajectory
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore, read_records
from agentenvs.rollout.inspect.check import Check, check_records
from agentenvs.rollout.policies.scripted import ScriptedPolicy
from agentenvs.rollout.tokenizer import train_chatml_tokenizer


def _read(env) -> JudgeInput:
    return JudgeInput("Find the hidden number.", "I found it.", str(env.secret))


class JudgedGuess(GuessNumberConfig):
    """guess_number judged on its final step: a registered environment of its own that
    declares the judge among its reward components (``EnvConfig.reward_components``)."""

    env_name: ClassVar[str] = "judged_guess"
    judge: JudgeSettings | None = None

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        return judged(super().make_text_env(task_index, split), self.judge, _read)

    def reward_components(self) -> list[RewardIdentity]:
        judge = [judge_identity(self.judge)] if self.judge is not None else []
        return [*super().reward_components(), *judge]


@pytest.fixture(autouse=True)
def _registered(monkeypatch):
    """JudgedGuess as a plugin registers it (an ``agentenvs.envs`` entry point)."""
    table = {**registry.ENVIRONMENTS.references(), "judged_guess": f"{__name__}:JudgedGuess"}
    widened = Registry("environment", table, unknown=registry.UnknownEnvError)
    monkeypatch.setattr(registry, "ENVIRONMENTS", widened)
    monkeypatch.setattr(catalogue, "ENVIRONMENTS", widened)  # where it is defined


def _collect(path: Path, settings: JudgeSettings) -> list:
    tokenizer = train_chatml_tokenizer()
    config = JudgedGuess(tasks=2, judge=settings)
    dataset = config.dataset(tokenizer, group_size=2)
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    asyncio.run(
        collect(builders, ScriptedPolicy(), CollectOptions(progress=False), store=TrajectoryStore(path))
    )  # fmt: skip
    return read_records(path)


@pytest.fixture
def proxy(vllm_server):  # noqa: F811
    clear_memory_cache()
    made = JudgeProxy(vllm_server.url)
    yield made
    made.close()


@pytest.mark.services
def test_judged_rewards_are_recorded_with_their_verdict_and_check_passes(proxy, tmp_path):
    regex = {"structured_outputs": {"regex": "SCORE: [0-9]"}}
    settings = JudgeSettings(base_url=proxy.url, model=SERVED_NAME, max_tokens=8, extra_body=regex)
    records = _collect(tmp_path / "judged.jsonl", settings)
    finals = [traj.transitions[-1] for r in records for traj in r.group.trajectories]
    assert len(finals) == 4
    for final in finals:
        logs = final.logs
        assert logs["judge/status"] == "ok" and logs["judge/model"] == SERVED_NAME
        assert logs["judge/verdict"] == f"SCORE: {int(logs['judge/score'])}"
        assert len(logs["judge/prompt_sha256"]) == 16
        assert final.reward == pytest.approx(1.0 + logs["judge/score"] / 10)  # add: env + judge
        assert final.metrics["judge/failed"] == 0
    assert proxy.requests == 2  # two tasks: a group's episodes share one request
    report = check_records(records)
    assert report.ok and report.status(Check.REWARDS) == "pass", report.by_check(Check.REWARDS)
    named = [c.name for c in recorded_components(records[0].provenance)]
    assert named == ["guess", "judge"]  # what the config declares, judge included


@pytest.mark.services
def test_a_judge_without_a_score_fails_check_naming_the_verdict(proxy, tmp_path):
    regex = {"structured_outputs": {"regex": "looks fine to me"}}
    settings = JudgeSettings(base_url=proxy.url, model=SERVED_NAME, max_tokens=32, extra_body=regex)
    records = _collect(tmp_path / "unread.jsonl", settings)
    final = records[0].group.trajectories[0].transitions[-1]
    assert final.logs["judge/status"] == "no_score" and final.reward == 1.0  # failure reward 0
    report = check_records(records)
    (failed,) = [f for f in report.by_check(Check.REWARDS) if f.status == "fail"]
    assert "4 of 4 judged episodes" in failed.detail and "looks fine to me" in failed.detail
    assert failed.where.startswith("judged_guess group")


def test_retool_config_wires_the_judge_and_keeps_its_group_metrics():
    settings = {"base_url": "http://127.0.0.1:9", "model": "j", "combine": "replace"}
    config = make("retool", judge=settings)
    env = config.make_text_env(0)
    assert isinstance(env, JudgedTextEnv) and env.settings.combine == "replace"
    inner = unwrap(env)
    assert type(inner).__name__ == "ReToolEnv" and env.problem is inner.problem
    assert not isinstance(make("retool").make_text_env(0), JudgedTextEnv)  # default unchanged
    ((_, metrics),) = asyncio.run(config.group_rewards([Trajectory([])], [env]))
    assert metrics["tool_use_rate"] == 0.0 and "pass@1" in metrics  # the episode is counted


def test_an_episode_ended_by_a_limit_is_not_judged(tmp_path):
    """By rule (docs/rewards.md, "Limits"): the env scores a cut-off episode like a wrong
    answer, and no judge is asked (the one named here listens nowhere)."""
    settings = JudgeSettings(base_url="http://127.0.0.1:9", model="nobody")
    config = JudgedGuess(tasks=2, judge=settings, limits={"max_turns": 1})
    tokenizer = train_chatml_tokenizer()
    dataset = config.dataset(tokenizer, group_size=2)
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    path = tmp_path / "limited.jsonl"
    asyncio.run(
        collect(builders, ScriptedPolicy(), CollectOptions(progress=False), store=TrajectoryStore(path))
    )  # fmt: skip
    finals = [t.transitions[-1] for r in read_records(path) for t in r.group.trajectories]
    limited = [f for f in finals if f.metrics.get("stop/max_turns")]
    assert limited, [f.metrics for f in finals]  # one guess rarely finds the number
    for final in limited:
        assert final.logs["judge/status"] == "not_judged", final.logs
        assert "judge/verdict" not in final.logs


def test_a_judged_env_opens_what_its_env_opens_before_the_prompt():
    """The judge wraps envs whose prompt exists only after ``start`` (a Harbor task lays out
    its files in the sandbox first); ``TextEnv.start``'s default shadowed the wrapper's
    forwarding, so the wrapped env was never started and its prompt raised."""
    from support.paths import REPO

    from agentenvs.envs.rendered_env import RenderedEnv
    from agentenvs.envs.renderers import make_renderer

    harbor = make("harbor", tasks=str(REPO / "tests" / "envs" / "harbor" / "tasks"))
    settings = JudgeSettings(base_url="http://127.0.0.1:9", model="nobody")
    env = JudgedTextEnv(harbor.make_text_env(0), settings, _read)
    rendered = RenderedEnv(env, make_renderer("chat", train_chatml_tokenizer()))
    prompt, _ = asyncio.run(rendered.initial_observation())
    text = train_chatml_tokenizer().decode(prompt)
    assert "words.txt" in text and " /app/data" not in text  # mapped into the workspace
    asyncio.run(rendered.close())


def test_a_dead_judge_fails_its_groups_unscored_after_the_collectors_retries(tmp_path):
    """Before: every episode was scored with the failure reward (0.0, status http_error)
    and trained on as a wrong answer. Now the attempt fails as transient, the collector
    retries it, and the group is recorded failed naming the judge (port 9: nobody)."""
    settings = JudgeSettings(base_url="http://127.0.0.1:9", model="nobody", retries=0)
    config = JudgedGuess(tasks=1, judge=settings)
    dataset = config.dataset(train_chatml_tokenizer(), group_size=2)
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    path = tmp_path / "dead_judge.jsonl"
    options = CollectOptions(progress=False, retries=1)
    asyncio.run(collect(builders, ScriptedPolicy(), options, store=TrajectoryStore(path)))
    (record,) = read_records(path)
    assert record.status == "failed", record
    assert "JudgeUnavailable" in record.error and "127.0.0.1:9" in record.error, record.error
    assert record.attempts == 2, record.attempts  # the collector's retry was taken
