"""The wire format of one trajectory: how a trajectory travels as JSON.

The store's records (``rollout/collect/records.py``), the env server and its remote
client (``envs/serving``, ``envs/remote``), Ray actors and verl's agent loop all move
trajectories in this one form, so it sits on the ground floor: it imports nothing of
the project but the trajectory types.

Observations are delta-encoded: a transition whose observation extends the previous
context (observation + action) stores only its new tokens (``ob_prefix`` tokens are
the previous context's, ``ob_new`` follow), so a long multi-turn episode costs linear,
not quadratic, space, and the prefix property training data relies on is visible in
the data itself.

Images travel by reference: a transition whose observation shows images adds
``images`` (the placements it adds, each naming its image's pixel hash, size, patch
grid, placeholder count and processor) and ``image_prefix`` (how many placements it
keeps from the previous observation, as ``ob_prefix`` keeps tokens). Records without
images carry neither key, and a reader of older records sees no images. The pixels
themselves live once beside a store (``rollout/collect/image_files.py``); only
``image_bytes=True`` (for a pickled hop between processes) puts them inline.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from agentenvs.envs.types import (
    ImagePlacement,
    ImageRef,
    TokensWithLogprobs,
    Trajectory,
    Transition,
)

IMAGES_SEEN_LOG = "images_seen"
"""The step log the collector writes on a turn whose observation held images: the
:func:`placements_digest` of what the policy was shown (a witness, not the env's output)."""


def placements_digest(images: Sequence[ImagePlacement]) -> str:
    """A short digest of where each image sits and which pixels it is: what a turn's
    records say the policy was shown (``images_seen``, ``policy/images``), so a store
    whose placements were edited afterwards (an image swapped, a run resized) differs."""
    text = ";".join(f"{p.offset}:{p.tokens}:{p.pad}:{p.image.sha256}" for p in images)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def placement_to_json(placement: ImagePlacement, *, image_bytes: bool = False) -> dict[str, Any]:
    image = placement.image
    data: dict[str, Any] = {
        "offset": placement.offset,
        "tokens": placement.tokens,
        "pad": placement.pad,
        "sha256": image.sha256,
        "width": image.width,
        "height": image.height,
        "grid": list(placement.grid),
        "processor": placement.processor,
    }
    if image_bytes and image.data is not None:
        data["data"] = image.data
    return data


def placement_from_json(data: dict[str, Any]) -> ImagePlacement:
    t, h, w = (int(v) for v in data["grid"])
    raw = data.get("data")
    image = ImageRef(str(data["sha256"]), int(data["width"]), int(data["height"]), raw)
    return ImagePlacement(
        offset=int(data["offset"]),
        tokens=int(data["tokens"]),
        pad=int(data["pad"]),
        image=image,
        grid=(t, h, w),
        processor=str(data["processor"]),
    )


def _image_fields(
    images: tuple[ImagePlacement, ...],
    previous: tuple[ImagePlacement, ...],
    extends: bool,
    image_bytes: bool,
) -> dict[str, Any]:
    """A transition's image keys: the placements kept from the previous observation
    (only where the observation extends it and they are the same) and the new ones."""
    if not images:
        return {}
    kept = len(previous) if extends and previous and images[: len(previous)] == previous else 0
    fields: dict[str, Any] = {
        "images": [placement_to_json(p, image_bytes=image_bytes) for p in images[kept:]]
    }
    if kept:
        fields["image_prefix"] = kept
    return fields


def trajectory_to_json(traj: Trajectory, *, image_bytes: bool = False) -> dict[str, Any]:
    transitions = []
    context: list[int] = []
    previous_images: tuple[ImagePlacement, ...] = ()
    for tr in traj.transitions:
        n = len(context)
        if n and len(tr.ob) >= n and tr.ob[:n] == context:
            prefix, new = n, tr.ob[n:]
        else:
            prefix, new = 0, tr.ob
        transitions.append(
            {
                "ob_prefix": prefix,
                "ob_new": list(new),
                "ac": list(tr.ac.tokens),
                "logprobs": None if tr.ac.logprobs is None else list(tr.ac.logprobs),
                "sampler_stop": tr.ac.stop_reason,
                "reward": tr.reward,
                "done": tr.episode_done,
                "metrics": dict(tr.metrics),
                "logs": dict(tr.logs),
                **_image_fields(tr.images, previous_images, prefix > 0, image_bytes),
            }
        )
        context = list(tr.ob) + list(tr.ac.tokens)
        previous_images = tr.images
    return {
        "transitions": transitions,
        "final_ob": list(traj.final_ob),
        "stop_reason": traj.stop_reason,
    }


def trajectory_from_json(data: dict[str, Any]) -> Trajectory:
    transitions = []
    context: list[int] = []
    previous_images: tuple[ImagePlacement, ...] = ()
    for turn, item in enumerate(data["transitions"]):
        prefix = int(item["ob_prefix"])
        if prefix > len(context):
            raise ValueError(
                f"turn {turn}: ob_prefix {prefix} is longer than the context ({len(context)})"
            )
        ob = context[:prefix] + list(item["ob_new"])
        logprobs = item.get("logprobs")
        logprobs = None if logprobs is None else list(logprobs)  # siblings share stored lists
        ac = TokensWithLogprobs(list(item["ac"]), logprobs, item["sampler_stop"])
        images: tuple[ImagePlacement, ...] = ()
        if "images" in item:
            kept = int(item.get("image_prefix", 0))
            if kept > len(previous_images):
                raise ValueError(
                    f"turn {turn}: image_prefix {kept} is more than the "
                    f"{len(previous_images)} images of the previous observation"
                )
            new_images = tuple(placement_from_json(p) for p in item["images"])
            images = previous_images[:kept] + new_images
        transitions.append(
            Transition(
                ob=ob,
                ac=ac,
                reward=float(item["reward"]),
                episode_done=bool(item["done"]),
                metrics=dict(item.get("metrics", {})),
                logs=dict(item.get("logs", {})),
                images=images,
            )
        )
        context = ob + ac.tokens
        previous_images = images
    return Trajectory(transitions, list(data.get("final_ob", [])), data.get("stop_reason"))
