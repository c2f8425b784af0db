"""A stand-in for vLLM's token-in/token-out endpoint with images, run by the tiny HF VLM.

Why a stand-in: the real vLLM CPU server (``.venv-vllm``, vLLM 0.32) cannot load a
Qwen-VL model here. Its Qwen2-VL/Qwen2.5-VL code imports
``transformers.models.qwen2_vl.image_processing_qwen2_vl`` (the torchvision backend),
and ``Qwen2VLProcessor`` needs a video processor that requires torchvision; PyPI's
torchvision wheels for torch 2.13 are CUDA-linked and fail against the CPU torch
("operator torchvision::nms does not exist"), and no CPU build for this torch is
offered. The real-vLLM test (``tests/rollout/policies/test_vision_engine.py``) runs
where ``.venv-vllm`` can import torchvision (``machine_skips.no_vllm_vision``).

What is emulated is the part the policy relies on, in vLLM's own field layout
(``vllm/entrypoints/scale_out/token_in_token_out/protocol.py``):

* ``POST /inference/v1/generate`` with ``token_ids`` (each image one
  ``<|image_pad|>``), ``content_parts`` (``image_url`` data URLs, in order),
  ``sampling_params`` (``max_tokens``, ``temperature``, ``top_p``, ``seed``,
  ``logprobs``, ``stop``/``stop_token_ids``, ``logit_bias``) and ``return_token_ids``;
* the engine's own expansion: each placeholder becomes as many as the *server's*
  image processor (the model's ``preprocessor_config.json``) gives the decoded image,
  as vLLM's multimodal processor does; the answer carries ``prompt_token_ids`` after
  expansion and ``mm_placeholders: {"image": [{"offset", "length"}]}``;
* ``choices[0]``: ``token_ids``, ``logprobs.content[i].logprob`` (integer ids),
  ``finish_reason`` and ``stop_reason`` (null on EOS, as vLLM).

A ``miscount`` setting makes the server expand every image by that many placeholders
more than its processor says, as an engine whose image processor disagrees with the
recorded count would; it then answers with its end-of-sequence token without running
the model (which would refuse such a prompt), so the policy's own check is what fails.
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass, field
from typing import Any

import torch
from fastapi import FastAPI, HTTPException

from agentenvs.envs.types import ImageObservation, ImagePlacement, ImageRef
from agentenvs.envs.vision.images import decode, pixel_hash, png_bytes
from agentenvs.rollout.policies.vision_hf import VisionSampler


@dataclass
class VisionBehaviour:
    miscount: int = 0
    """Placeholders added to every image's expansion (0: the processor's count)."""
    bodies: list[dict[str, Any]] = field(default_factory=list)


def _expand(sampler: VisionSampler, body: dict[str, Any], extra: int) -> ImageObservation:
    """The prompt after the engine's placeholder expansion, with its image placements."""
    pad = sampler.image_token
    parts = body.get("content_parts") or []
    images = []
    for part in parts:
        url = part.get("url", "")
        if part.get("type") != "image_url" or not url.startswith("data:image/"):
            raise HTTPException(400, f"unsupported content part {part.get('type')!r}")
        images.append(decode(base64.b64decode(url.split(",", 1)[1])))
    tokens: list[int] = []
    placements: list[ImagePlacement] = []
    remaining = list(images)
    for token in body["token_ids"]:
        if token != pad:
            tokens.append(token)
            continue
        if not remaining:
            raise HTTPException(400, "more image placeholders than images")
        image = remaining.pop(0)
        grid, count = sampler.processing.grid_and_tokens(image)
        count += extra
        ref = ImageRef(pixel_hash(image), image.width, image.height, png_bytes(image))
        placements.append(ImagePlacement(len(tokens), count, pad, ref, grid, sampler.spec.key()))
        tokens += [pad] * count
    if remaining:
        raise HTTPException(400, f"{len(remaining)} images without a placeholder")
    return ImageObservation(tokens, placements)


def add_generate_route(app: FastAPI, sampler: VisionSampler, behaviour: VisionBehaviour) -> None:
    @app.post("/inference/v1/generate")
    async def generate(body: dict) -> dict:
        behaviour.bodies.append(body)
        params = body.get("sampling_params") or {}
        prompt = _expand(sampler, body, behaviour.miscount)
        if behaviour.miscount:  # the model cannot run on a miscounted prompt: answer with EOS
            return _answer(prompt, [sorted(sampler.eos_token_ids)[0]], [0.0], "stop", None)
        generator = torch.Generator()
        if params.get("seed") is not None:
            generator.manual_seed(int(params["seed"]))
        stop = list(params.get("stop") or []) or list(params.get("stop_token_ids") or [])
        try:
            out = await asyncio.to_thread(
                sampler.generate,
                prompt,
                stop=stop,
                max_tokens=int(params.get("max_tokens", 16)),
                temperature=float(params.get("temperature", 1.0)),
                top_p=float(params.get("top_p", 1.0)),
                generator=generator,
            )
        except Exception as err:  # what the engine would answer: the model rejected the input
            raise HTTPException(400, f"{type(err).__name__}: {err}") from None
        finish = "length" if out.stop_reason == "length" else "stop"
        matched = None if out.stop_reason != "stop" else out.tokens[-1]
        return _answer(prompt, out.tokens, out.logprobs or [], finish, matched)


def _answer(
    prompt: ImageObservation, tokens: list[int], logprobs: list[float], finish: str, matched: Any
) -> dict[str, Any]:
    content = [
        {"token_id": t, "logprob": lp, "top_logprobs": []}
        for t, lp in zip(tokens, logprobs, strict=True)
    ]
    return {
        "request_id": "standin",
        "output_mode": "tokens",
        "prompt_token_ids": list(prompt),
        "mm_placeholders": {
            "image": [{"offset": p.offset, "length": p.tokens} for p in prompt.images]
        },
        "choices": [
            {
                "index": 0,
                "token_ids": tokens,
                "logprobs": {"content": content},
                "finish_reason": finish,
                "stop_reason": matched,
            }
        ],
    }


def make_vision_app(
    sampler: VisionSampler, behaviour: VisionBehaviour, name: str = "tiny-vl"
) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": name, "object": "model"}]}

    add_generate_route(app, sampler, behaviour)
    return app
