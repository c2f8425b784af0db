"""What every trainer hand-off of images shares: the stored pixels and the recorded processing.

A sample names its images (:class:`~agentenvs.envs.types.ImagePlacement`: offset,
placeholder count, pixel hash, grid, processor settings); the pixels are the store's
files. :func:`sample_pixels` loads them (checked against their names) and runs the
recorded processor on them, refusing a grid that differs from the recorded one: the
pixel values a trainer gets are the ones the engine was given, never re-derived from
decoded text. :func:`received_signature` is how a hand-off is checked back: per
image, the offset of its run in the tokens the trainer gets, its count and the hash
of the pixels the trainer holds (``rollout/inspect/image_checks.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentenvs.envs.types import ImagePlacement
from agentenvs.envs.vision.images import open_ref, pixel_hash
from agentenvs.envs.vision.processing import ImageProcessing
from agentenvs.envs.vision.render import placeholder_runs
from agentenvs.rollout.collect.image_files import ImageFiles
from agentenvs.rollout.data.samples import TrainingSample


class HandoffImageError(ValueError):
    """A sample's images cannot be handed off as recorded (missing, altered, re-derived)."""


@dataclass
class SamplePixels:
    """One sample's images as a trainer feeds them."""

    images: list[Any]
    """RGB PIL images, in order."""
    png: list[bytes]
    """The stored PNG bytes, in order."""
    pixel_values: Any
    """The recorded processor's output for all of them (``None`` for no images)."""
    grids: list[tuple[int, int, int]]


def sample_pixels(sample: TrainingSample, store: str | Path) -> SamplePixels:
    """The sample's stored images and their pixel values, by the recorded processing."""
    if not sample.images:
        return SamplePixels([], [], None, [])
    files = ImageFiles(store)
    keys = {p.processor for p in sample.images}
    if len(keys) != 1:
        raise HandoffImageError(f"one sample's images were rendered by {len(keys)} processors")
    refs = [files.ref(p.image) for p in sample.images]
    images = [open_ref(r) for r in refs]
    processed = ImageProcessing.for_key(keys.pop()).process(images)
    for placement, grid in zip(sample.images, processed.grids, strict=True):
        if grid != placement.grid:
            raise HandoffImageError(
                f"image {placement.image.sha256[:12]}: the recorded processor gives grid {grid} "
                f"now, the record says {placement.grid}"
            )
    return SamplePixels(
        images, [r.data or b"" for r in refs], processed.pixel_values, processed.grids
    )


def merged_count(placement_grid: tuple[int, int, int], processor: str) -> int:
    """Placeholder positions of a grid under the recorded processor's merge size."""
    return ImageProcessing.for_key(processor).spec.tokens(placement_grid)


def received_signature(
    tokens: Sequence[int],
    pad: int,
    counts: Sequence[int],
    images: Sequence[Any],
    *,
    start: int = 0,
) -> list[tuple[int, int, str]]:
    """(offset, count, pixel hash) per image as a trainer receives them: the runs of
    ``pad`` found in ``tokens`` (offsets from ``start``, the first real token), the counts
    it will feed, the hashes of the PIL images it holds."""
    runs = placeholder_runs(list(tokens), pad)
    offsets = [offset - start for offset, _ in runs]
    if len(offsets) != len(counts) or len(counts) != len(images):
        return [(o, n, "") for o, n in runs]
    return [
        (offset, int(count), pixel_hash(image))
        for offset, count, image in zip(offsets, counts, images, strict=True)
    ]


def pad_id(samples: Sequence[TrainingSample]) -> int | None:
    pads = {p.pad for s in samples for p in s.images}
    if len(pads) > 1:
        raise HandoffImageError(f"samples use {len(pads)} different image placeholder ids")
    return pads.pop() if pads else None


def placements_of(samples: Sequence[TrainingSample]) -> list[ImagePlacement]:
    return [p for s in samples for p in s.images]
