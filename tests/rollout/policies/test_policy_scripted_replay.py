"""make_policy, the scripted policy and the replay policy."""

from __future__ import annotations

import pytest
from support.rollout_helpers import CountdownEnv, EchoPolicy, RecordingBuilder

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.rollouts import do_group_rollout
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import check_policy_options, make_policy
from agentenvs.rollout.policies.base import PolicyError
from agentenvs.rollout.policies.replay import ReplayPolicy


def test_make_policy_validates_names_and_options(tmp_path):
    with pytest.raises(ValueError, match="unknown policy 'gpt'; choose one of hf, interactive"):
        make_policy("gpt")
    with pytest.raises(ValueError, match=r"unknown option.*varient.*accepted: variant"):
        make_policy("scripted", varient="oracle")
    with pytest.raises(ValueError, match="option url is required"):
        make_policy("openai")
    with pytest.raises(ValueError, match="temperature"):
        make_policy("openai", url="http://127.0.0.1:1", temperature="hot")
    policy = make_policy("openai", url="http://127.0.0.1:1/v1/", temperature="0.5", retries="2")
    assert (policy.temperature, policy.retries, policy.url) == (0.5, 2, "http://127.0.0.1:1")
    with pytest.raises(FileNotFoundError, match="no trajectory file"):
        make_policy("replay", path=tmp_path / "missing.jsonl")


async def test_scripted_needs_an_env_with_a_scripted_policy(tokenizer):
    with pytest.raises(PolicyError, match="CountdownEnv has no scripted policy"):
        await do_group_rollout(RecordingBuilder(), make_policy("scripted"))
    builder = GuessNumberConfig(tasks=1).group_builder(0, 1, tokenizer)
    with pytest.raises(PolicyError, match="GuessNumberEnv has no scripted variant 'psychic'"):
        await do_group_rollout(builder, make_policy("scripted", variant="psychic"))


async def test_scripted_variants_and_stop_reasons(tokenizer):
    builder = GuessNumberConfig(tasks=1).group_builder(0, 1, tokenizer)
    group = await do_group_rollout(builder, make_policy("scripted", variant="malformed"))
    (traj,) = group.trajectories
    assert traj.stop_reason == "max_turns"
    for tr in traj.transitions:
        # No stop string in the text: the end-of-turn token ends it, like EOS.
        assert tr.ac.stop_reason == "eos"
        assert tr.ac.tokens[-1] == tokenizer.eos_token_id
        assert tr.reward == -0.1


async def _collect_guess_number(tokenizer, policy, store, tasks=3):
    builders = list(GuessNumberConfig(tasks=tasks).dataset(tokenizer, group_size=2).builders)
    return await collect(builders, policy, CollectOptions(progress=False), store=store)


async def test_replay_reproduces_a_run_exactly(tokenizer, tmp_path):
    original = TrajectoryStore(tmp_path / "a.jsonl")
    await _collect_guess_number(tokenizer, make_policy("scripted"), original)
    replay = make_policy("replay", path=tmp_path / "a.jsonl")
    copy = TrajectoryStore(tmp_path / "b.jsonl")
    result = await _collect_guess_number(tokenizer, replay, copy)
    assert len(result.ok) == 3
    a = {r.key: r.group for r in original.read()}
    b = {r.key: r.group for r in copy.read()}
    assert a.keys() == b.keys()
    for key in a:
        for ta, tb in zip(a[key].trajectories, b[key].trajectories, strict=True):
            assert [t.ob for t in ta.transitions] == [t.ob for t in tb.transitions]
            assert [t.ac for t in ta.transitions] == [t.ac for t in tb.transitions]
            assert ta.stop_reason == tb.stop_reason


async def test_replay_keeps_logprobs_and_sampler_stop_reasons(tmp_path):
    store = TrajectoryStore(tmp_path / "a.jsonl")
    await collect([RecordingBuilder()], EchoPolicy(), CollectOptions(progress=False), store=store)
    replayed = await collect(
        [RecordingBuilder()], make_policy("replay", path=store.path), CollectOptions(progress=False)
    )
    (record,) = replayed.ok
    for traj in record.group.trajectories:
        assert [t.ac.logprobs for t in traj.transitions] == [[-0.5, -0.25]] * 2
        assert [t.ac.stop_reason for t in traj.transitions] == ["stop"] * 2


async def test_replay_detects_divergence(tokenizer, tmp_path):
    store = TrajectoryStore(tmp_path / "a.jsonl")
    await _collect_guess_number(tokenizer, make_policy("scripted"), store)
    # Same keys, different hidden numbers: the env answers differently after turn 1.
    builders = list(GuessNumberConfig(tasks=3, seed=1).dataset(tokenizer, group_size=2).builders)
    result = await collect(
        builders, make_policy("replay", path=store.path), CollectOptions(retries=0, progress=False)
    )
    errors = [r.error for r in result.failed]
    assert errors, "a different task must not replay cleanly"
    assert all("PolicyError: replay diverged at turn" in e for e in errors)


async def test_replay_without_a_collector_matches_by_observation(tokenizer, tmp_path):
    store = TrajectoryStore(tmp_path / "a.jsonl")
    await _collect_guess_number(tokenizer, make_policy("scripted"), store)
    replay = ReplayPolicy.from_file(store.path)
    builder = GuessNumberConfig(tasks=3).group_builder(1, 2, tokenizer)
    group = await do_group_rollout(builder, replay)
    recorded = store.latest()["1:train/1"].group
    assert [t.transitions[-1].ac for t in group.trajectories] == [
        t.transitions[-1].ac for t in recorded.trajectories
    ]
    missing = GuessNumberConfig(tasks=3, low=5).group_builder(0, 1, tokenizer)
    with pytest.raises(PolicyError, match=r"diverged at turn 1: .* no recorded trajectory"):
        await do_group_rollout(missing, replay)


async def test_replay_reports_unknown_keys_and_running_out(tmp_path):
    store = TrajectoryStore(tmp_path / "a.jsonl")
    await collect([RecordingBuilder()], EchoPolicy(), CollectOptions(progress=False), store=store)
    replay = make_policy("replay", path=store.path)
    result = await collect(
        [RecordingBuilder(task_id="other")], replay, CollectOptions(retries=0, progress=False)
    )
    assert "has no completed group with key '0:other'" in result.failed[0].error
    longer = RecordingBuilder(env_factory=lambda a, i: CountdownEnv(turns=3))
    result = await collect([longer], replay, CollectOptions(retries=0, progress=False))
    assert "ran out of recorded turns at turn 3" in result.failed[0].error


async def test_weights_version_is_recorded_with_every_group(tokenizer):
    policy = make_policy("scripted", weights_version="step-12")
    builders = list(GuessNumberConfig(tasks=2).dataset(tokenizer, group_size=1).builders)
    result = await collect(builders, policy, CollectOptions(progress=False))
    options = {"variant": "oracle", "weights_version": "step-12"}
    assert [r.provenance["policy"] for r in result.records] == [
        {"kind": "scripted", "model": None, "url": None, "weights_version": "step-12",
         "options": options}
    ] * 2  # fmt: skip


def test_weights_version_is_refused_by_a_policy_that_does_not_declare_it():
    """Only a policy that declares the capability takes a version: one written onto a
    human's answers would label them with weights that never sampled them."""
    with pytest.raises(ValueError, match=r"'interactive' does not declare weights_version.*hf, "):
        make_policy("interactive", weights_version=3)
    with pytest.raises(ValueError, match="'replay' does not declare weights_version"):
        check_policy_options("replay", {"path": "runs.jsonl", "weights_version": 3})
    check_policy_options("scripted", {"weights_version": 3})  # declared: accepted
