"""Sending an observation with images to vLLM, token in and token out, and checking the engine.

vLLM's token-in/token-out endpoint (``POST /inference/v1/generate``, vLLM 0.32:
``vllm/entrypoints/scale_out/token_in_token_out``) takes ``token_ids`` plus
``content_parts``, the raw images (``{"type": "image_url", "url": "data:image/png;
base64,..."}``), in the order their placeholders appear. Its multimodal processor
expands each image's ``<|image_pad|>`` into as many as its own image processor gives
the image, so the request carries each run collapsed to one placeholder, and with
``return_token_ids`` the answer has the prompt ids after that expansion
(``prompt_token_ids``) and where each image landed (``mm_placeholders``). The policy
compares both with the observation: the engine must have produced exactly the
recorded tokens and runs, or the turn is refused (a count the engine disagrees with
would train on a context the model never saw).

The sampled ids come back in ``choices[0].token_ids`` with their logprobs in
``choices[0].logprobs.content`` (the sampled token's own entry, integer ids: the
generate server needs no tokenizer). The turn is stamped ``policy/images`` with the
digest of the engine's placeholder ranges and the pixel hashes of the images sent.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from agentenvs.envs.types import (
    ImagePlacement,
    StopCondition,
    TokensWithLogprobs,
    observation_images,
)
from agentenvs.envs.vision.images import ImageError, open_ref
from agentenvs.envs.wire import placements_digest
from agentenvs.rollout.policies.base import PolicyError, StampedTokens
from agentenvs.rollout.policies.stop import split_stop
from agentenvs.rollout.policies.wire_dialects import turn_result

GENERATE_PATH = "/inference/v1/generate"
NEVER_SAMPLED_BIAS = -100.0
"""The logit bias that keeps image markup out of sampled tokens (a sampled placeholder
would make the next context one no engine can expand)."""


def collapsed(tokens: Sequence[int], images: Sequence[ImagePlacement]) -> list[int]:
    """``tokens`` with each image's placeholder run cut to one placeholder (what the
    engine's processor expands)."""
    out: list[int] = []
    cursor = 0
    for placement in images:
        out += tokens[cursor : placement.offset + 1]
        cursor = placement.end
    return out + list(tokens[cursor:])


def image_parts(images: Sequence[ImagePlacement]) -> list[dict[str, Any]]:
    """The images as vLLM content parts: PNG data URLs, each checked against its name."""
    parts = []
    for placement in images:
        try:
            open_ref(placement.image)
        except ImageError as err:
            raise PolicyError(f"an image of the observation cannot be sent: {err}") from None
        data = base64.b64encode(placement.image.data or b"").decode("ascii")
        parts.append({"type": "image_url", "url": f"data:image/png;base64,{data}"})
    return parts


def image_markup(tokens: Sequence[int], images: Sequence[ImagePlacement]) -> set[int]:
    """The ids that frame images in ``tokens``: each placeholder and the tokens just
    before and after its run (the vision start and end markers)."""
    markup = set()
    for placement in images:
        markup.add(placement.pad)
        if placement.offset > 0:
            markup.add(tokens[placement.offset - 1])
        if placement.end < len(tokens):
            markup.add(tokens[placement.end])
    return markup


def generate_body(
    observation: Sequence[int],
    stop: StopCondition,
    sampling: dict[str, Any],
    never_sample: Sequence[int] = (),
) -> dict[str, Any]:
    """The ``/inference/v1/generate`` request for one turn (``sampling``: max_tokens,
    temperature, top_p and, when set, seed)."""
    images = observation_images(observation)
    params: dict[str, Any] = {
        **sampling,
        "n": 1,
        "logprobs": 1,
        "include_stop_str_in_output": True,
        "skip_special_tokens": False,
        **split_stop(stop).request_fields(),
    }
    markup = set(never_sample) | image_markup(observation, images)
    params["logit_bias"] = {str(t): NEVER_SAMPLED_BIAS for t in sorted(markup)}
    return {
        "token_ids": collapsed(list(observation), images),
        "content_parts": image_parts(images),
        "sampling_params": params,
        "return_token_ids": True,
        "output_mode": "tokens",
    }


def engine_images(
    data: dict[str, Any], observation: Sequence[int], url: str
) -> list[ImagePlacement]:
    """The engine's expansion checked against the observation: its prompt ids must be
    the observation's tokens and its image ranges the recorded runs. Returns the
    placements as the engine laid them out (with the images sent)."""
    images = observation_images(observation)
    prompt = data.get("prompt_token_ids")
    if prompt is None:
        raise PolicyError(f"{url} did not return the expanded prompt ids (return_token_ids)")
    if list(prompt) != list(observation):
        at = next(
            (i for i, (a, b) in enumerate(zip(prompt, observation, strict=False)) if a != b),
            min(len(prompt), len(observation)),
        )
        raise PolicyError(
            f"{url} expanded the images to {len(prompt)} prompt tokens, the observation holds "
            f"{len(observation)}; they differ from token {at}: the engine's image processor "
            "does not give the recorded placeholder counts"
        )
    ranges = ((data.get("mm_placeholders") or {}).get("image")) or []
    found = [(int(r["offset"]), int(r["length"])) for r in ranges]
    recorded = [(p.offset, p.tokens) for p in images]
    if found != recorded:
        raise PolicyError(
            f"{url} placed the images at (offset, length) {found[:4]}; recorded {recorded[:4]}"
        )
    return list(images)


def parse_generate(
    data: dict[str, Any], observation: Sequence[int], url: str
) -> tuple[list[int], list[float] | None, str | None, Any, dict[str, Any]]:
    """Tokens, logprobs, finish reason, stop reason and the image stamp of a generate
    answer whose prompt expansion matches the observation."""
    placed = engine_images(data, observation, url)
    try:
        choice = data["choices"][0]
        tokens = [int(t) for t in choice["token_ids"]]
        content = (choice.get("logprobs") or {}).get("content")
        logprobs = None if content is None else [float(c["logprob"]) for c in content]
        finish, matched = choice.get("finish_reason"), choice.get("stop_reason")
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise PolicyError(f"unexpected {GENERATE_PATH} response from {url}: {err}") from None
    stamp = {"images": placements_digest(placed), "image_tokens": len(placed)}
    return tokens, logprobs, finish, matched, stamp


async def sample_with_images(
    policy: Any,
    client: Any,
    observation: Sequence[int],
    stop: StopCondition,
    cap: int,
    seed: int | None,
) -> tuple[dict[str, Any], TokensWithLogprobs]:
    """One turn of an :class:`~agentenvs.rollout.policies.openai_compat.OpenAICompatPolicy`
    whose observation shows images: the request body and the stamped answer."""
    sampling: dict[str, Any] = {
        "max_tokens": cap,
        "temperature": policy.temperature,
        "top_p": policy.top_p,
    }
    if seed is not None:
        sampling["seed"] = seed
    body = generate_body(observation, stop, sampling, sorted(policy.never_sample))
    body["model"] = policy.served_model()
    data = await policy.pool.send(client, "POST", GENERATE_PATH, body, spread=True)
    tokens, logprobs, finish, matched, stamp = parse_generate(data, observation, policy.url)
    # vLLM leaves stop_reason null when the model's own EOS ended the turn.
    eos_by_server = finish == "stop" and matched is None
    out = turn_result(tokens, logprobs, finish, policy.eos_token_ids, policy.url, eos_by_server)
    return body, StampedTokens(out.tokens, out.logprobs, out.stop_reason, stamp=stamp)
