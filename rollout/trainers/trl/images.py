"""Samples with images in the shape TRL's VLM GRPO trainer feeds its model.

TRL's ``GRPOTrainer`` keeps a batch's images flat: ``pixel_values`` with every
image's patch rows one after another, ``image_grid_thw`` one row per image, and
``num_images`` per sample; it cuts them per sample by the grids
(``trl.trainer.utils.split_pixel_values_by_grid``, and the same arithmetic in
``_get_per_token_logps_and_entropies``). :func:`trl_image_batch` builds those fields
from the stored pixels through the recorded processing, plus ``images`` (the PIL
images of each sample, TRL's dataset column), so the slice TRL takes for a sample is
that sample's images, each expanded to the count the engine used.

TRL itself gets images into a rollout only from its dataset (its ``rollout_func``
path returns token ids and logprobs; the trainer then runs its processor on the
dataset's prompt images): a tool's picture in turn three never reaches its forward
pass. These fields are what that forward pass needs for the whole multi-turn sample.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentenvs.rollout.data.samples import TrainingSample
from agentenvs.rollout.trainers.images import (
    merged_count,
    pad_id,
    received_signature,
    sample_pixels,
)


def trl_image_batch(samples: Sequence[TrainingSample], store: str | Path) -> dict[str, Any]:
    """``pixel_values``, ``image_grid_thw``, ``num_images`` and ``images`` for a batch of
    samples, in TRL's flat layout (samples in order)."""
    import torch

    values, grids, counts, images = [], [], [], []
    for sample in samples:
        pixels = sample_pixels(sample, store)
        counts.append(len(pixels.images))
        images.append(pixels.images)
        if pixels.images:
            values.append(pixels.pixel_values)
            grids += pixels.grids
    if not grids:
        return {"num_images": counts, "images": images}
    return {
        "pixel_values": torch.cat(values, dim=0),
        "image_grid_thw": torch.tensor(grids, dtype=torch.long),
        "num_images": counts,
        "images": images,
    }


def received(
    batch: Mapping[str, Any], samples: Sequence[TrainingSample]
) -> list[list[tuple[int, int, str]]]:
    """Per sample, (offset, count, pixel hash) of each image as TRL will feed it: the
    batch cut by TRL's own ``split_pixel_values_by_grid``, counts from each sample's
    grids, hashes of the sample's PIL images."""
    from trl.trainer.utils import split_pixel_values_by_grid

    pad = pad_id(samples)
    if pad is None or "image_grid_thw" not in batch:
        return [[] for _ in samples]
    split = split_pixel_values_by_grid(dict(batch))
    key = next(p.processor for s in samples for p in s.images)
    out = []
    for sample, grids, images in zip(
        samples, split["image_grid_thw"], batch["images"], strict=True
    ):
        counts = [merged_count(tuple(g), key) for g in grids.tolist()]
        out.append(received_signature(sample.tokens, pad, counts, images))
    return out
