"""The Hugging Face policy, end to end with a tiny randomly initialised transformers model."""

from __future__ import annotations

import pytest
from support.rollout_tiny_model import save_tiny_model, teacher_forced_logprobs

from agentenvs.envs.guess_number import GuessNumberConfig, GuessNumberEnv
from agentenvs.envs.rendered_env import Limits
from agentenvs.rollout.collect.collector import CollectOptions, collect, summarize
from agentenvs.rollout.collect.rollouts import do_group_rollout
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.policies.base import (
    DEFAULT_MAX_TOKENS,
    PolicyError,
    check_max_tokens,
    turn_token_cap,
)

PROMPT = "<|im_start|>user\nguess the number<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    return save_tiny_model(tmp_path_factory.mktemp("tiny-llama"), tokenizer)


@pytest.fixture(scope="module")
def greedy(model_dir):
    return make_policy("hf", model=str(model_dir), temperature=0.0, max_tokens=64)


def _prompt(tokenizer) -> list[int]:
    return tokenizer.encode(PROMPT, add_special_tokens=False)


class SevenStopsEnv(GuessNumberEnv):
    """guess_number with "7" as an extra stop string, a string this random model writes
    often, so a short run sees turns end on a stop string as well as on the cap."""

    def stop_sequences(self) -> list[str]:
        return ["</guess>", "7"]


class SevenStopsConfig(GuessNumberConfig):
    def make_text_env(self, task_index: int, split: str = "train") -> SevenStopsEnv:
        return SevenStopsEnv(self.secret(task_index, split), self.low, self.high)


async def test_guess_number_group_end_to_end(model_dir, tokenizer):
    policy = make_policy("hf", model=str(model_dir), temperature=1.0, seed=3)
    limits = Limits(max_turns=3, max_tokens_per_turn=12, on_truncated_action="pass")
    config = SevenStopsConfig(tasks=2, limits=limits)
    builder = config.group_builder(0, group_size=4, tokenizer=tokenizer)
    group = await do_group_rollout(builder, policy)
    model = policy.sampler.model
    stops = ["</guess>", "7", "<|im_end|>"]
    assert len(group.trajectories) == 4
    reasons = set()
    for traj in group.trajectories:
        assert traj.stop_reason in {"max_turns", "completed"}
        for tr in traj.transitions:
            ac = tr.ac
            reasons.add(ac.stop_reason)
            assert 1 <= len(ac.tokens) <= 12
            assert ac.logprobs is not None and len(ac.logprobs) == len(ac.tokens)
            text = tokenizer.decode(ac.tokens)
            if ac.stop_reason == "length":
                assert len(ac.tokens) == 12
            if ac.stop_reason == "eos":
                assert ac.tokens[-1] == tokenizer.eos_token_id
            if ac.stop_reason == "stop":
                assert any(s in text for s in stops)
            # Nothing after the first stop: the previous tokens hold no stop string.
            assert not any(s in tokenizer.decode(ac.tokens[:-1]) for s in stops)
        # The logprobs are the model's own: one teacher-forced pass over the final
        # sequence (temperature 1) gives the same numbers at every sampled position.
        last = traj.transitions[-1]
        sequence = last.ob + last.ac.tokens
        reference = teacher_forced_logprobs(model, sequence)
        for tr in traj.transitions:
            assert sequence[: len(tr.ob) + len(tr.ac.tokens)] == tr.ob + tr.ac.tokens
            expected = reference[len(tr.ob) : len(tr.ob) + len(tr.ac.tokens)]
            assert tr.ac.logprobs == pytest.approx(expected, abs=1e-4)
    assert "stop" in reasons and "length" in reasons


async def test_collected_hf_run_is_stored_and_summarised(model_dir, tokenizer, tmp_path):
    policy = make_policy("hf", model=str(model_dir), temperature=0.8, top_p=0.9, seed=0)
    limits = Limits(max_turns=2, max_tokens_per_turn=8, on_truncated_action="pass")
    builders = list(
        GuessNumberConfig(tasks=2, limits=limits).dataset(tokenizer, group_size=2).builders
    )
    store = TrajectoryStore(tmp_path / "hf.jsonl")
    result = await collect(
        builders, policy, CollectOptions(concurrency=2, progress=False), store=store
    )
    assert len(result.ok) == 2
    summary = summarize(list(store.read()))
    assert summary["trajectories"] == 4 and summary["tokens_sampled"] > 0
    provenance = result.records[0].provenance
    assert provenance["policy"]["model"] == str(model_dir)
    assert provenance["sampling"]["temperature"] == 0.8


async def test_greedy_is_deterministic_and_tiny_top_p_is_greedy(model_dir, greedy, tokenizer):
    prompt = _prompt(tokenizer)
    a = await greedy(prompt, [], max_tokens=10)
    b = await greedy(prompt, [], max_tokens=10)
    assert a == b and len(a.tokens) <= 10
    nucleus = make_policy("hf", model=str(model_dir), temperature=1.0, top_p=1e-6, seed=1)
    c = await nucleus(prompt, [], max_tokens=10)
    assert c.tokens == a.tokens


async def test_same_seed_same_samples(model_dir, tokenizer):
    prompt = _prompt(tokenizer)
    runs = []
    for _ in range(2):
        policy = make_policy("hf", model=str(model_dir), temperature=1.5, seed=11)
        runs.append(await policy(prompt, [], max_tokens=16))
    assert runs[0] == runs[1]


async def _greedy_tokens(greedy, tokenizer, n: int) -> list[int]:
    out = await greedy(_prompt(tokenizer), [], max_tokens=n)
    assert out.stop_reason == "length" and len(out.tokens) == n, "pick a prompt without EOS"
    return out.tokens


async def test_max_tokens_gives_length(greedy, tokenizer):
    out = await greedy(_prompt(tokenizer), [], max_tokens=5)
    assert out.stop_reason == "length" and len(out.tokens) == 5


async def test_stop_string_completed_inside_a_token_keeps_that_token(greedy, tokenizer):
    tokens = await _greedy_tokens(greedy, tokenizer, 12)
    full = tokenizer.decode(tokens)
    # A stop string that starts inside an earlier token's text and ends in a later one.
    stop = full[3:9]
    assert stop
    expected = next(j for j in range(1, 13) if stop in tokenizer.decode(tokens[:j]))
    out = await greedy(_prompt(tokenizer), [stop], max_tokens=12)
    assert out.stop_reason == "stop"
    assert out.tokens == tokens[:expected]  # stops right after the completing token, kept
    assert stop in tokenizer.decode(out.tokens)


async def test_stop_token_ids_and_eos(model_dir, greedy, tokenizer):
    tokens = await _greedy_tokens(greedy, tokenizer, 6)
    out = await greedy(_prompt(tokenizer), [tokens[2]], max_tokens=6)
    assert out.stop_reason == "stop" and out.tokens == tokens[: tokens.index(tokens[2]) + 1]
    # Treat the fourth greedy token as end-of-sequence: the turn ends there with "eos".
    eos = make_policy("hf", model=str(model_dir), temperature=0.0, eos_token_ids=[tokens[3]])
    out = await eos(_prompt(tokenizer), [], max_tokens=6)
    assert out.stop_reason == "eos" and out.tokens == tokens[: tokens.index(tokens[3]) + 1]


async def test_bad_model_path_and_empty_observation(tmp_path, greedy):
    with pytest.raises(ValueError, match="cannot load a causal LM"):
        make_policy("hf", model=str(tmp_path / "nothing-here"))
    with pytest.raises(PolicyError, match="empty observation"):
        await greedy([], [], max_tokens=3)


async def test_cancelled_generation_stops_and_frees_the_model(greedy, tokenizer):
    import threading

    cancel = threading.Event()
    cancel.set()
    with pytest.raises(PolicyError, match="generation cancelled"):
        greedy.sampler.generate(_prompt(tokenizer), stop=[], max_tokens=50, cancel=cancel)
    assert not greedy.sampler._lock.locked()


async def test_group_timeout_with_a_long_generation(model_dir, tokenizer):
    policy = make_policy("hf", model=str(model_dir), temperature=1.0, max_tokens=100_000, seed=0)
    builders = list(GuessNumberConfig(tasks=1).dataset(tokenizer, group_size=1).builders)
    result = await collect(
        builders, policy, CollectOptions(group_timeout=0.2, retries=0, progress=False)
    )
    assert "TimeoutError" in result.failed[0].error
    # The cancelled worker thread gave the model back: the next turn runs.
    out = await policy(_prompt(tokenizer), [], max_tokens=3)
    assert len(out.tokens) == 3


def test_turn_cap_rule() -> None:
    # Unset: the env's cap rules, whatever its size; set: the policy's bound, which an env
    # cap can only lower; neither: the default.
    assert turn_token_cap(None, 500) == 500
    assert turn_token_cap(None, 16384) == 16384
    assert turn_token_cap(None, None) == DEFAULT_MAX_TOKENS
    assert turn_token_cap(64, 500) == 64
    assert turn_token_cap(600, 500) == 500
    assert turn_token_cap(64, None) == 64
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        check_max_tokens(0)


async def test_a_policy_without_its_own_cap_samples_up_to_the_envs(model_dir, tokenizer):
    # A preset's per-turn budget above the old 256 default must reach the sampler: with no
    # stop the tiny model writes until the cap the env gave, not until 256.
    policy = make_policy("hf", model=str(model_dir), temperature=1.0, seed=5, eos_token_ids=[])
    assert policy.max_tokens is None
    out = await policy(_prompt(tokenizer), [], max_tokens=DEFAULT_MAX_TOKENS + 20)
    assert len(out.tokens) == DEFAULT_MAX_TOKENS + 20
    bounded = make_policy(
        "hf", model=str(model_dir), temperature=1.0, seed=5, max_tokens=30, eos_token_ids=[]
    )
    out = await bounded(_prompt(tokenizer), [], max_tokens=DEFAULT_MAX_TOKENS + 20)
    assert len(out.tokens) == 30
