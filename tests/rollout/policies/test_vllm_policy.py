"""The OpenAI-compatible policy against a real vLLM server (CPU build, from .venv-vllm).

The stand-in server of test_policy_openai.py speaks the wire format; this module
checks what only the real engine can show: tokens in and out exactly, logprobs
that match a teacher-forced pass of the same weights, per-sample seeds that keep
a GRPO group's episodes apart, and provenance that names the served model.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from support.rollout_tiny_model import teacher_forced_logprobs
from support.vllm_checks import assert_check_passes
from support.vllm_server import SERVED_NAME, vllm_server  # noqa: F401  (the session fixture)

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.rendered_env import Limits
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.policies.request_trace import RequestTrace
from agentenvs.rollout.policies.vllm_cpus import thread_cpus
from agentenvs.rollout.policies.vllm_metrics import engine_work, read_vllm_metrics
from agentenvs.rollout.policies.vllm_server import VLLMOptions, server_cpus

pytestmark = pytest.mark.services  # starts a real service

PROMPT = "<|im_start|>user\nguess the number<|im_end|>\n<|im_start|>assistant\n"
LIMITS = Limits(max_turns=3, max_tokens_per_turn=12, on_truncated_action="pass")


@pytest.fixture(scope="module")
def hf_model(vllm_server):  # noqa: F811
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(vllm_server.model_dir, dtype=torch.float32)


def _builders(tokenizer, tasks: int, group_size: int):
    config = GuessNumberConfig(tasks=tasks, limits=LIMITS)
    return [config.group_builder(i, group_size, tokenizer) for i in range(tasks)]


def _episodes(record) -> list[tuple[tuple[int, ...], ...]]:
    return [
        tuple(tuple(tr.ac.tokens) for tr in traj.transitions) for traj in record.group.trajectories
    ]


async def test_tokens_and_logprobs_round_trip_through_real_vllm(
    vllm_server,  # noqa: F811
    hf_model,
    tokenizer,
):
    policy = make_policy("openai", url=vllm_server.url, tokenizer=tokenizer, max_tokens=12)
    prompt = tokenizer.encode(PROMPT, add_special_tokens=False)
    out = await policy(prompt, ["</guess>"], max_tokens=12)
    assert policy.model == SERVED_NAME  # discovered from /v1/models
    assert 1 <= len(out.tokens) <= 12 and out.stop_reason in {"stop", "eos", "length"}
    assert out.logprobs is not None and len(out.logprobs) == len(out.tokens)
    reference = teacher_forced_logprobs(hf_model, prompt + out.tokens)[len(prompt) :]
    assert max(abs(a - b) for a, b in zip(out.logprobs, reference, strict=True)) < 1e-3
    await policy.aclose()


async def test_seeded_group_gives_distinct_episodes_that_the_same_seeds_reproduce(
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    policy = make_policy("openai", url=vllm_server.url, tokenizer=tokenizer, seed=7)
    keys = ["g0"]
    first = await collect(
        _builders(tokenizer, 1, 4), policy, CollectOptions(progress=False), keys=keys
    )
    again = await collect(
        _builders(tokenizer, 1, 4), policy, CollectOptions(progress=False), keys=keys
    )
    episodes = _episodes(first.ok[0])
    assert len(set(episodes)) == 4  # one seed for all would make these identical
    assert _episodes(again.ok[0]) == episodes
    seeds = [
        tr.logs["policy/seed"] for traj in first.ok[0].group.trajectories for tr in traj.transitions
    ]
    assert len(seeds) == len(set(seeds))  # every sampled turn has its own, recorded seed
    other = make_policy("openai", url=vllm_server.url, tokenizer=tokenizer, seed=8)
    moved = await collect(
        _builders(tokenizer, 1, 4), other, CollectOptions(progress=False), keys=keys
    )
    assert _episodes(moved.ok[0]) != episodes  # the base seed matters
    await policy.aclose()
    await other.aclose()


async def test_provenance_names_the_discovered_model_and_check_passes(
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    policy = make_policy(
        "openai", url=vllm_server.url, tokenizer=tokenizer, seed=3, weights_version=0
    )
    store = TrajectoryStore(tmp_path / "run.jsonl")
    result = await collect(
        _builders(tokenizer, 2, 4), policy, CollectOptions(progress=False), store=store
    )
    assert len(result.ok) == 2
    for record in store.read():
        described = record.provenance["policy"]
        assert described["model"] == SERVED_NAME  # not null: found before the group finished
        assert described["weights_version"] == 0
        for traj in record.group.trajectories:
            for tr in traj.transitions:
                assert tr.logs["policy/weights_version"] == 0
    await policy.aclose()
    assert_check_passes(store.path, vllm_server.model_dir, 0, 0)


async def test_many_concurrent_seeded_long_prompts_keep_the_engine_alive(
    vllm_server,  # noqa: F811
    tokenizer,
):
    # With chunked prefill on, vLLM-CPU dies here ("CPU Generator does not use offset"):
    # a seeded request whose prompt is split over steps rewinds a CPU generator.
    policy = make_policy("openai", url=vllm_server.url, seed=1, max_tokens=4, concurrency=40)
    prompts = [[16 + (i * 31 + j * 7) % 2000 for j in range(1500)] for i in range(40)]
    outs = await asyncio.gather(*(policy(p, [], max_tokens=4) for p in prompts))
    assert all(len(out.tokens) == 4 for out in outs)
    assert vllm_server.alive()
    await policy.aclose()


def test_the_engine_shares_its_cpus_and_the_api_server_runs_apart(vllm_server):  # noqa: F811
    # Left to float, vLLM-CPU's engine core lands on another core than its model worker,
    # and a burst of requests is then admitted one at a time (vllm_cpus.py's notes).
    placement = server_cpus(VLLMOptions())
    group = [
        pid
        for pid in (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
        if _process_group(pid) == vllm_server.process.pid
    ]
    engine = [pid for pid in group if _name(pid) in {"VLLM::EngineCor", "VLLM::Worker"}]
    assert len(engine) == 2  # the engine core and its model worker
    for pid in engine:
        for cpus in thread_cpus(pid).values():
            assert cpus <= set(placement.engine), (_name(pid), cpus)
    api_threads = thread_cpus(vllm_server.process.pid)
    expected = set(placement.frontend or placement.engine)
    assert len(api_threads) > 1 and all(cpus <= expected for cpus in api_threads.values())
    if placement.frontend:  # more than one CPU here: the API server is off the engine's
        assert not expected & set(placement.engine)


def _process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


async def test_engine_work_between_two_metric_reads_counts_what_the_engine_did(
    vllm_server,  # noqa: F811
    tokenizer,
):
    trace = RequestTrace()
    policy = make_policy("openai", url=vllm_server.url, seed=5, concurrency=8, trace=trace)
    prompts = [tokenizer.encode(f"{PROMPT} {i}", add_special_tokens=False) for i in range(6)]
    before = await read_vllm_metrics(vllm_server.url)
    outs = await asyncio.gather(*(policy(p, [], max_tokens=9) for p in prompts))
    after = await read_vllm_metrics(vllm_server.url)
    await policy.aclose()
    work = engine_work(before, after)
    assert work.requests == 6
    assert work.generation_tokens == sum(len(out.tokens) for out in outs)
    assert work.prompt_tokens == sum(len(p) for p in prompts)
    assert max(len(out.tokens) for out in outs) <= work.engine_steps
    assert work.engine_steps <= sum(len(out.tokens) for out in outs) + len(prompts)
    assert work.decode_s > 0 and work.e2e_s > 0 and work.preemptions == 0
    assert len(trace.spans) == 6 and sum(s.sampled_tokens for s in trace.spans) == sum(
        len(out.tokens) for out in outs
    )
