"""Trainer hand-offs that feed an importance ratio say so when a sample has no logprobs.

The scripted policy has no logprobs (issue #30: it used to claim 0.0 per token, which
reads as "probability 1"). Its samples carry ``has_logprobs=False`` and 0.0 stands in;
a Tinker, PyTRIO or TRL loss would silently take that as the sampler's logprob, so
each of those hand-offs warns, naming the first such sample. A run with logprobs
gets no warning (so the warning cannot be always-on noise).
"""

from __future__ import annotations

import asyncio
import warnings

import pytest

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.data.samples import trajectories_to_samples
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.trainers.common import MissingLogprobsWarning


class WithLogprobs:
    """The scripted oracle with made-up negative logprobs (a sampler that has them)."""

    per_env = True

    def __init__(self) -> None:
        self.inner = make_policy("scripted")

    def __call__(self, env):
        policy = self.inner(env)

        async def call(observation, stop, *, max_tokens=None):
            out = await policy(observation, stop, max_tokens=max_tokens)
            return TokensWithLogprobs(out.tokens, [-0.5] * len(out.tokens), out.stop_reason)

        return call


def _groups(tokenizer, policy):
    config = GuessNumberConfig(tasks=2)
    builders = [config.group_builder(i, 2, tokenizer) for i in range(2)]
    result = asyncio.run(collect(builders, policy, CollectOptions(progress=False)))
    return [r.group for r in result.ok]


@pytest.fixture(scope="module")
def scripted(tokenizer):
    return _groups(tokenizer, make_policy("scripted"))


@pytest.fixture(scope="module")
def sampled(tokenizer):
    return _groups(tokenizer, WithLogprobs())


def _samples(groups):
    return trajectories_to_samples(groups, [[1.0] * len(g.trajectories) for g in groups])


def _quiet(call) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingLogprobsWarning)
        call()


def test_scripted_samples_say_they_have_no_logprobs(scripted, sampled):
    samples = _samples(scripted)
    assert samples and not any(s.has_logprobs for s in samples)
    assert all(tr.ac.logprobs is None for g in scripted for t in g.trajectories
               for tr in t.transitions)  # fmt: skip
    assert all(s.has_logprobs for s in _samples(sampled))


def test_tinker_datums_warn_on_samples_without_logprobs(scripted, sampled):
    from agentenvs.rollout.trainers.tinker.handoff import to_cookbook_group, to_tinker_datums

    samples = _samples(scripted)
    with pytest.warns(MissingLogprobsWarning, match=r"to_tinker_datums: 4 of 4 samples have no "
                      r"sampler logprobs \(first: group 0 trajectory 0 sample 0\)"):  # fmt: skip
        to_tinker_datums(samples)
    with pytest.warns(MissingLogprobsWarning, match="to_cookbook_group: .* actions have no"):
        to_cookbook_group(scripted[0])
    _quiet(lambda: to_tinker_datums(_samples(sampled)))
    _quiet(lambda: to_cookbook_group(sampled[0]))


def test_pytrio_datums_warn_on_samples_without_logprobs(scripted, sampled):
    from agentenvs.rollout.trainers.pytrio.handoff import to_pytrio_datums

    with pytest.warns(MissingLogprobsWarning, match="to_pytrio_datums: 4 of 4 samples"):
        to_pytrio_datums(_samples(scripted))
    _quiet(lambda: to_pytrio_datums(_samples(sampled)))


def test_trl_batch_warns_on_rollouts_without_logprobs(scripted, sampled, tokenizer):
    from agentenvs.rollout.trainers.trl.rollout_func import _as_trl_batch

    with pytest.warns(MissingLogprobsWarning, match="rollout_func: 4 of 4 rollouts"):
        _as_trl_batch(scripted, tokenizer, weights_version=0)
    _quiet(lambda: _as_trl_batch(sampled, tokenizer, weights_version=0))


def test_a_mixed_batch_names_the_first_sample_without_logprobs(scripted, sampled):
    from agentenvs.rollout.trainers.tinker.handoff import to_tinker_datums

    mixed = _samples([sampled[0], scripted[1]])
    with pytest.warns(MissingLogprobsWarning, match=r"2 of 4 samples .*\(first: group 1 "
                      r"trajectory 0 sample 0\)"):  # fmt: skip
        to_tinker_datums(mixed)
