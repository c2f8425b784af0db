"""Every environment x renderer x protocol on each real vocabulary, scripted and sampled.

The scripted policy plays each environment's oracle; a tiny randomly initialised
model over the real vocabulary samples tokens that are mostly invalid UTF-8 on
their own and do not survive a decode/encode round trip, which is what real
sampling does to the data path. For every cell an independent checker written
here asserts the data-path properties from what the policy itself saw and
returned (recorded by a wrapper, not read back from the library):

* each stored observation is the context the policy was called with, and each
  stored action is exactly what it returned, tokens and logprobs;
* each training sample is the concatenation of those observations and actions,
  with mask 1 exactly on the sampled tokens and the sampler's logprob on each;
* for the model, every stored logprob equals a teacher-forced forward pass;

and ``agentenvs check`` passes on the stored run.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from support.rollout_tiny_model import teacher_forced_logprobs
from support.vocab import shared_vocabulary

from agentenvs.envs import make
from agentenvs.envs.tool_calls import ToolCallLog
from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.rollouts import current_group_key, current_slot
from agentenvs.rollout.data.samples import trajectories_to_samples
from agentenvs.rollout.inspect.check import Check, check_records
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.policies.hf import HFPolicy
from agentenvs.rollout.policies.tiny_model import build_tiny_model

VOCABS = ["qwen2.5", "qwen3", "deepseek-v3"]

# cell name -> (environment, config overrides). Protocols pick their renderer.
CELLS: dict[str, tuple[str, dict[str, Any]]] = {
    "guess_number/chat": ("guess_number", {"tasks": 1}),
    "guess_number/continuation": ("guess_number", {"tasks": 1, "renderer": "continuation"}),
    "search_r1/tags": ("search_r1", {}),
    "search_r1/tool_call": ("search_r1", {"protocol": "tool_call"}),
    "retool/retool": ("retool", {}),
    "retool/tool_call": ("retool", {"protocol": "tool_call"}),
    "alfworld/chat": ("alfworld", {}),
    "alfworld/window": ("alfworld", {"history": "window"}),
}
# A random model rarely ends its turn: cut-off text is passed on (an invalid action
# the environment answers), so episodes still run several turns.
SAMPLED_LIMITS = {"max_turns": 3, "max_tokens_per_turn": 10, "on_truncated_action": "pass"}


@dataclass
class Call:
    observation: list[int]
    output: TokensWithLogprobs


@dataclass
class Recorder:
    """Wraps a policy (factory) and keeps every call per (group key, trajectory)."""

    inner: Any
    per_env: bool = True
    calls: dict[tuple[str | None, int], list[Call]] = field(default_factory=dict)

    def __call__(self, env: Any) -> Any:
        policy = self.inner(env) if getattr(self.inner, "per_env", False) else self.inner
        slot = current_slot.get()
        calls = self.calls.setdefault((current_group_key.get(), slot.traj_index), [])

        async def recorded(observation, stop, *, max_tokens=None):
            out = await policy(observation, stop, max_tokens=max_tokens)
            calls.append(Call(list(observation), out))
            return out

        return recorded


@pytest.fixture(scope="module")
def tiny_models() -> dict[str, Any]:
    """One tiny model per vocabulary: 2 layers, hidden size 16 (the embedding alone is
    the vocabulary's 129k-152k rows)."""
    return {}


def _model(cache: dict[str, Any], name: str, tok: Any) -> Any:
    if name not in cache:
        cache[name] = build_tiny_model(tok, hidden_size=16, seed=1).eval()
    return cache[name]


def _run(tok: Any, env: str, overrides: dict[str, Any], policy: Any) -> list[Any]:
    config = make(env, **overrides)
    dataset = config.dataset(tok, group_size=2, n_groups=1)
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    result = asyncio.run(
        collect(builders, policy, CollectOptions(concurrency=1, retries=0, progress=False))
    )
    assert not result.failed, [r.error for r in result.failed]
    return result.ok


def _expected_samples(calls: list[Call]) -> list[tuple[list[int], list[int], list[float]]]:
    """Samples as the policy's own calls define them: a new one wherever the context
    it was given does not start with everything it saw and sampled before."""
    samples: list[tuple[list[int], list[int], list[float]]] = []
    tokens: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for call in calls:
        ob = call.observation
        if tokens and ob[: len(tokens)] != tokens:
            samples.append((tokens, mask, logprobs))
            tokens, mask, logprobs = [], [], []
        new = ob[len(tokens) :]
        sampled = call.output.tokens
        lp = call.output.logprobs or [0.0] * len(sampled)
        tokens = tokens + new + sampled
        mask = mask + [0] * len(new) + [1] * len(sampled)
        logprobs = logprobs + [0.0] * len(new) + list(lp)
    samples.append((tokens, mask, logprobs))
    return samples


def _assert_data_path(records: list[Any], recorder: Recorder, tok: Any) -> list[Any]:
    groups = [r.group for r in records]
    samples = trajectories_to_samples(groups, [[0.0] * len(g.trajectories) for g in groups])
    size = len(tok)
    by_traj: dict[tuple[int, int], list[Any]] = {}
    for s in samples:
        by_traj.setdefault((s.group_index, s.traj_index), []).append(s)
    for g, record in enumerate(records):
        for t, traj in enumerate(record.group.trajectories):
            calls = recorder.calls[(record.key, t)]
            assert len(calls) == len(traj.transitions)
            for call, tr in zip(calls, traj.transitions, strict=True):
                assert tr.ob == call.observation  # the context the policy saw
                assert tr.ac.tokens == call.output.tokens  # exactly what it sampled
                assert tr.ac.logprobs == call.output.logprobs
            got = [(s.tokens, s.loss_mask, s.logprobs) for s in by_traj[(g, t)]]
            assert got == _expected_samples(calls)
            for tokens, *_ in got:
                assert max(tokens) < size
    return samples


def _assert_tool_call_tokens(records: list[Any], tok: Any) -> int:
    """Each recorded tool-call attempt names the sampled tokens that hold its text, and
    no fewer: the range holds the call, and dropping its first or last token loses it."""
    located = 0
    for rec in records:
        for traj in rec.group.trajectories:
            for transition in traj.transitions:
                log = ToolCallLog.from_logs(transition.logs)
                if log is None:
                    continue
                tokens = list(transition.ac.tokens)
                text = tok.decode(tokens, skip_special_tokens=False)
                for attempt in log.attempts:
                    assert attempt.tokens is not None, attempt
                    first, last = attempt.tokens
                    call = text[attempt.span[0] : attempt.span[1]]
                    assert call, attempt
                    held = [
                        call in tok.decode(tokens[a:b], skip_special_tokens=False)
                        for a, b in ((first, last), (first + 1, last), (first, last - 1))
                    ]
                    assert held == [True, False, False], (attempt, call, held)
                    located += 1
    return located


def _assert_check_passes(records: list[Any], tok: Any, *, silent_tools: bool = False) -> None:
    """``silent_tools``: the policy (a randomly initialised model) fires no tool call, so
    the tool audit must fail, naming the environment; every other check must pass."""
    report = check_records(records, tokenizer=tok)
    failed = [f for f in report.findings if f.status == "fail"]
    if silent_tools:
        assert failed and {f.check for f in failed} == {Check.TOOL_CALLS}, failed
        assert all(f.detail.startswith(f"{records[0].env}: ") for f in failed), failed
    else:
        assert report.ok, failed
    for name in (Check.FIXED_TRAJECTORY, Check.RE_RENDERING):
        assert report.status(name) == "pass", report.by_check(name)


@pytest.mark.parametrize("cell", list(CELLS))
@pytest.mark.parametrize("name", VOCABS)
def test_scripted_policy(name, cell):
    tok = shared_vocabulary(name)
    env, overrides = CELLS[cell]
    recorder = Recorder(make_policy("scripted"))
    records = _run(tok, env, overrides, recorder)  # each environment's own limits
    _assert_data_path(records, recorder, tok)
    _assert_check_passes(records, tok)
    located = _assert_tool_call_tokens(records, tok)
    assert located > 0 or env == "guess_number", "the oracle's tool calls were not recorded"
    rewards = [r for rec in records for r in rec.group.total_rewards()]
    assert max(rewards) > 0, rewards  # the oracle solved its tasks on this vocabulary


@pytest.mark.parametrize("cell", list(CELLS))
@pytest.mark.parametrize("name", VOCABS)
def test_tiny_model_policy(name, cell, tiny_models):
    tok = shared_vocabulary(name)
    env, overrides = CELLS[cell]
    model = _model(tiny_models, name, tok)
    recorder = Recorder(HFPolicy(model, tok, max_tokens=10, seed=7))
    if env == "search_r1":  # its own search-turn budget must fit the turn limit
        overrides = {**overrides, "max_turns": 2}
    records = _run(tok, env, {**overrides, "limits": SAMPLED_LIMITS}, recorder)
    samples = _assert_data_path(records, recorder, tok)
    _assert_check_passes(records, tok, silent_tools=env != "guess_number")  # it has no tools
    # Logprobs are the model's own: a teacher-forced pass over the first sample agrees.
    first = samples[0]
    forced = teacher_forced_logprobs(model, first.tokens)
    for pos, (m, lp) in enumerate(zip(first.loss_mask, first.logprobs, strict=True)):
        if m:
            assert lp == pytest.approx(forced[pos], abs=2e-3), pos
