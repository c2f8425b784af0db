"""Requests in flight over time (rollout/policies/request_trace.py), on spans whose
right answers are worked out by hand, and through a policy against the stand-in server."""

from __future__ import annotations

import pytest
from support.rollout_tiny_model import save_tiny_model
from support.rollout_vllm_standin import Behaviour, make_app, serve

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.rendered_env import Limits
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.policies.hf import HFPolicy
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.policies.request_trace import (
    RequestSpan,
    RequestTrace,
    in_flight_steps,
    occupancy,
    sparkline,
)


def span(sent: float, answered: float, waited: float = 0.0) -> RequestSpan:
    return RequestSpan(
        sent=sent,
        answered=answered,
        server="s",
        prompt_tokens=1,
        max_tokens=1,
        sampled_tokens=1,
        waited=waited,
    )


def test_in_flight_is_a_step_function_and_a_slot_handed_on_never_reads_as_two():
    # two slots: A 0-4, B 1-2, C sent the instant B answered (2-3), D 5-6
    spans = [span(10, 14), span(11, 12), span(12, 13, waited=1.0), span(15, 16)]
    assert in_flight_steps(spans) == [(0, 1), (1, 2), (2, 2), (3, 1), (4, 0), (5, 1), (6, 0)]


def test_occupancy_counts_full_and_idle_time_exactly():
    spans = [span(10, 14), span(11, 12), span(12, 13, waited=1.0), span(15, 16)]
    found = occupancy(spans, concurrency=2)
    assert found.seconds == 6 and found.requests == 4
    # in flight: 1 for 1 s, 2 for 2 s, 1 for 1 s, 0 for 1 s, 1 for 1 s
    assert found.mean_in_flight == pytest.approx((1 + 4 + 1 + 0 + 1) / 6)
    assert found.full_share == pytest.approx(2 / 6)
    assert found.idle_share == pytest.approx(1 / 6)
    assert found.refill_ms_median == pytest.approx(0.0)  # C left the instant B answered


def test_a_client_slow_to_hand_a_slot_on_shows_in_refill_and_in_full_share():
    prompt = [span(0, 1), span(0, 1)]
    quick = [*prompt, span(1.0, 2.0, waited=1.0), span(1.0, 2.0, waited=1.0)]
    slow = [*prompt, span(1.004, 2.004, waited=1.0), span(1.004, 2.004, waited=1.0)]
    assert occupancy(quick, 2).refill_ms_median == pytest.approx(0.0)
    assert occupancy(slow, 2).refill_ms_median == pytest.approx(4.0)
    assert occupancy(slow, 2).full_share < occupancy(quick, 2).full_share


def test_sparkline_draws_one_block_per_bucket_scaled_to_the_concurrency():
    spans = [span(0, 2), span(0, 1)]  # 2 in flight for 1 s, then 1 for 1 s
    assert sparkline(spans, width=4, concurrency=2) == "██▄▄"
    assert sparkline(spans, width=4, concurrency=4) == "▄▄▂▂"
    assert sparkline([], width=4) == ""


def test_occupancy_refuses_a_concurrency_below_one():
    with pytest.raises(ValueError, match="concurrency"):
        occupancy([span(0, 1)], 0)


def test_bodies_are_kept_only_when_asked():
    body = {"prompt": [1, 2]}
    kept, dropped = RequestTrace(keep_bodies=True), RequestTrace()
    for trace in (kept, dropped):
        trace.add(RequestSpan(0, 1, "s", 2, 4, 3, body=body))
    assert kept.spans[0].body == body and dropped.spans[0].body is None


@pytest.fixture(scope="module")
def hf(tmp_path_factory, tokenizer):
    return HFPolicy(str(save_tiny_model(tmp_path_factory.mktemp("tiny-llama"), tokenizer)))


async def test_a_policy_traces_every_turn_of_a_collection_with_its_slot(hf, tokenizer):
    limits = Limits(max_turns=3, max_tokens_per_turn=6, on_truncated_action="pass")
    config = GuessNumberConfig(tasks=2, limits=limits)
    builders = [config.group_builder(i, 2, tokenizer) for i in range(2)]
    trace = RequestTrace(keep_bodies=True)
    with serve(make_app(hf.sampler, Behaviour())) as url:
        policy = OpenAICompatPolicy(url, tokenizer=tokenizer, seed=3, concurrency=2, trace=trace)
        result = await collect(builders, policy, CollectOptions(concurrency=2, progress=False))
        await policy.aclose()
    turns = {
        (record.key, index, turn): transition
        for record in result.ok
        for index, traj in enumerate(record.group.trajectories)
        for turn, transition in enumerate(traj.transitions)
    }
    assert sorted(turns) == sorted(s.slot for s in trace.spans)  # one span per turn
    for found in trace.spans:
        transition = turns[found.slot]
        assert found.prompt_tokens == len(transition.ob)
        assert found.sampled_tokens == len(transition.ac.tokens)
        assert found.body["prompt"] == transition.ob
        assert found.body["seed"] == transition.logs["policy/seed"]
        assert found.server == url and found.answered >= found.sent and found.waited >= 0
    assert 0 < trace.occupancy(2).mean_in_flight <= 2


def test_time_between_turns_is_per_episode_and_leaves_out_slot_waits():
    def turn(episode: int, number: int, sent: float, answered: float, waited: float = 0.0):
        return RequestSpan(sent, answered, "s", 1, 1, 1, waited, slot=("g", episode, number))

    spans = [
        turn(0, 0, 0.0, 1.0),
        turn(0, 1, 1.002, 2.0),  # 2 ms of env work
        turn(1, 0, 0.0, 0.5),
        turn(1, 1, 1.503, 2.5, waited=1.0),  # 3 ms of env work, then 1 s for a slot
        turn(1, 2, 2.504, 3.0),
    ]
    assert occupancy(spans, 2).think_ms_median == pytest.approx(3.0)
    assert occupancy(spans[:2], 2).think_ms_median == pytest.approx(2.0)
