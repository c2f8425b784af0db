"""Vision policies on the tiny random Qwen2-VL (real Qwen2.5 vocabulary): the HF path and the
engine path, each checking what the model or engine was given against the observation.

The engine path runs against ``support/vision_generate_standin.py``, an emulation of
vLLM's ``/inference/v1/generate`` over the same tiny model, because the real vLLM CPU
server cannot load a Qwen-VL model here (it needs torchvision, and no CPU torchvision
for this torch exists on the registries; see that module). The test with the real
server is at the end, skipped (machine condition ``vllm-vision``) where that holds.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import torch
from support import machine_skips
from support.rollout_vllm_standin import serve
from support.vision_generate_standin import VisionBehaviour, make_vision_app
from support.vision_runs import (
    PAD,
    ModelTurns,
    charts_config,
    collect_charts,
    tiny_vlm_dir,
    tiny_vlm_policy,
)
from support.vocab import shared_vocabulary

from agentenvs.envs.types import ImageObservation, ImageRef, TokensWithLogprobs
from agentenvs.envs.vision.images import open_ref
from agentenvs.rollout.inspect.check import check_file
from agentenvs.rollout.policies.base import PolicyError, StampedTokens
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy


def two_image_observation() -> ImageObservation:
    """A charts context after one zoom: the chart in the prompt, a crop from the tool."""
    config = charts_config()
    env = config.make_env(0, shared_vocabulary("qwen2.5"))
    asyncio.run(env.initial_observation())
    step = asyncio.run(env.step(env.scripted_action()[0]))
    assert len(step.next_observation.images) == 2
    return step.next_observation


def teacher_forced(policy, ob: ImageObservation, tokens: list[int]) -> list[float]:
    sampler = policy.sampler
    grids = torch.tensor([p.grid for p in ob.images])
    pixels = sampler.processing.process([open_ref(p.image) for p in ob.images]).pixel_values
    ids = torch.tensor([list(ob) + tokens])
    types = (ids == PAD).int()
    with torch.inference_mode():
        logits = sampler.model(
            input_ids=ids, pixel_values=pixels, image_grid_thw=grids, mm_token_type_ids=types
        ).logits[0]
    logprobs = torch.log_softmax(logits.float(), -1)
    return [float(logprobs[len(ob) - 1 + i, t]) for i, t in enumerate(tokens)]


def test_hf_vlm_samples_with_the_images_and_exact_logprobs():
    policy = tiny_vlm_policy()  # make_policy("hf", model=<the saved VLM>)
    assert policy.sees_images() and policy.model_name == str(tiny_vlm_dir())
    ob = two_image_observation()
    out = asyncio.run(policy(ob, ["</answer>"], max_tokens=12))
    assert isinstance(out, StampedTokens) and out.stamp["image_tokens"] == 2
    forced = teacher_forced(policy, ob, out.tokens)
    assert max(abs(a - b) for a, b in zip(forced, out.logprobs, strict=True)) < 1e-4
    assert not set(out.tokens) & policy.sampler.never_sample
    text = asyncio.run(policy(list(range(100, 140)), [], max_tokens=4))  # a VLM reads text too
    assert len(text.tokens) == 4 and not isinstance(text, StampedTokens)


def test_hf_vlm_refuses_an_observation_the_model_would_read_differently():
    policy = tiny_vlm_policy()
    ob = two_image_observation()
    first, second = ob.images
    short = list(ob)
    del short[first.offset]  # a converter dropped one placeholder
    moved = [dataclasses.replace(first, tokens=first.tokens - 1), second.shifted(-1)]
    with pytest.raises(PolicyError, match="processor gives image"):
        asyncio.run(policy(ImageObservation(short, moved), [], max_tokens=2))
    with pytest.raises(PolicyError, match="placeholder runs"):
        asyncio.run(policy(ImageObservation(short, ob.images), [], max_tokens=2))
    other = dataclasses.replace(
        first, processor=first.processor.replace("max_pixels=50176", "max_pixels=1003520")
    )
    with pytest.raises(PolicyError, match="rendered for processor"):
        asyncio.run(policy(ImageObservation(ob, [other, second]), [], max_tokens=2))
    swapped = ImageRef(first.image.sha256, first.image.width, first.image.height, second.image.data)
    with pytest.raises(PolicyError, match="hash to"):
        asyncio.run(
            policy(
                ImageObservation(ob, [dataclasses.replace(first, image=swapped), second]),
                [],
                max_tokens=2,
            )
        )


def test_the_collector_never_sends_images_to_a_policy_that_cannot_see_them(tmp_path):
    async def text_only(observation, stop, *, max_tokens=None):
        return TokensWithLogprobs([1], None, "stop")

    result = collect_charts(text_only, tmp_path / "blind.jsonl", groups=1)
    assert len(result.failed) == 1
    assert "cannot see images" in result.failed[0].error


def test_engine_path_checks_the_engines_expansion(tmp_path):
    sampler = tiny_vlm_policy().sampler
    behaviour = VisionBehaviour()
    with serve(make_vision_app(sampler, behaviour)) as url:
        engine = OpenAICompatPolicy(
            url, tokenizer=shared_vocabulary("qwen2.5"), seed=7, max_tokens=12
        )
        store = tmp_path / "engine.jsonl"
        result = collect_charts(ModelTurns(engine, model_turns=(1,)), store)
        assert not result.failed, result.failed[0].error
        report = check_file(store, tokenizer=shared_vocabulary("qwen2.5"))
        assert report.ok, [f for f in report.findings if f.status == "fail"]
        assert any("2 of them confirmed" in f.detail or "confirmed by the model" in f.detail
                   for f in report.findings)  # fmt: skip
        body = behaviour.bodies[0]
        assert body["token_ids"].count(PAD) == len(body["content_parts"]) == 2  # collapsed
        assert body["content_parts"][0]["url"].startswith("data:image/png;base64,")
        assert str(PAD) in body["sampling_params"]["logit_bias"]
        engine_turns = [t.transitions[1] for r in result.ok for t in r.group.trajectories]
        assert all(t.logs["policy/images"] == t.logs["images_seen"] for t in engine_turns)
        assert all(t.ac.logprobs is not None for t in engine_turns)

        behaviour.miscount = 1  # an engine whose processor gives one placeholder more
        failed = collect_charts(
            ModelTurns(engine, model_turns=(1,)), tmp_path / "bad.jsonl", groups=1
        )
        assert (
            failed.failed
            and "does not give the recorded placeholder counts" in failed.failed[0].error
        )


@pytest.mark.services
@machine_skips.needs("vllm-vision")
def test_real_vllm_expands_each_image_to_the_recorded_count(tmp_path):
    """The engine path against the real vLLM server with the tiny Qwen2-VL (needs a
    vLLM venv whose torchvision works on the CPU; skipped where none exists)."""
    from agentenvs.rollout.policies.vision_tiny_model import save_tiny_vlm
    from agentenvs.rollout.policies.vllm_server import VLLMOptions, start_vllm

    tokenizer = shared_vocabulary("qwen2.5")
    model = save_tiny_vlm(tmp_path / "model", tokenizer)
    options = VLLMOptions(served_model_name="tiny-vl", lora_rank=None, max_model_len=4096)
    with start_vllm(model, tmp_path / "vllm.log", options) as server:
        engine = OpenAICompatPolicy(server.url, tokenizer=tokenizer, seed=7, max_tokens=12)
        store = tmp_path / "vllm.jsonl"
        result = collect_charts(ModelTurns(engine, model_turns=(1,)), store)
        assert not result.failed, result.failed[0].error
        assert check_file(store, tokenizer=tokenizer).ok
