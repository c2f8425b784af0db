"""Samples with images as Tinker datums: ``ModelInput`` with ``ImageChunk``s.

Tinker (and the cookbook's renderers) put an image in a ``ModelInput`` as an
``ImageChunk`` standing for ``expected_tokens`` positions, between the text chunks
that hold the vision start and end tokens; the placeholder ids themselves are not
sent. So a sample's token list is cut at each recorded placeholder run, the run
becomes an ``ImageChunk`` of the stored PNG bytes with ``expected_tokens`` = the
recorded count (the backend refuses a mismatch), and every per-token input keeps
its length. Targets at image positions are 0, as the cookbook's
``create_rightshifted_model_input_and_leftshifted_targets`` writes them; loss,
advantage and logprob there are 0 already (observation tokens). The result equals the
cookbook's ``trajectory_to_data`` over the same trajectories with image chunks in
their observations (tests compare them).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agentenvs.envs.types import ImagePlacement, TrajectoryGroup
from agentenvs.envs.vision.images import decode, pixel_hash
from agentenvs.rollout.collect.image_files import ImageFiles
from agentenvs.rollout.data.samples import TrainingSample, gc_paused
from agentenvs.rollout.trainers.common import warn_missing_logprobs
from agentenvs.rollout.trainers.tinker.handoff import sample_to_datum, to_cookbook_group

if TYPE_CHECKING:
    import tinker


def image_model_input(
    tokens: Sequence[int], images: Sequence[ImagePlacement], files: ImageFiles
) -> tinker.ModelInput:
    """``tokens`` with each image's placeholder run replaced by its ``ImageChunk``."""
    import tinker

    chunks: list[Any] = []
    cursor = 0
    for placement in images:
        if placement.end > len(tokens):
            raise ValueError(f"image at token {placement.offset} runs past the sequence end")
        if placement.offset > cursor:
            chunks.append(tinker.EncodedTextChunk(tokens=list(tokens[cursor : placement.offset])))
        data = files.ref(placement.image).data or b""
        chunks.append(
            tinker.types.ImageChunk(data=data, format="png", expected_tokens=placement.tokens)
        )
        cursor = placement.end
    if cursor < len(tokens):
        chunks.append(tinker.EncodedTextChunk(tokens=list(tokens[cursor:])))
    return tinker.ModelInput(chunks=chunks)


def sample_to_image_datum(sample: TrainingSample, files: ImageFiles) -> tinker.Datum:
    """One sample as a datum; a sample without images is :func:`sample_to_datum`'s."""
    datum = sample_to_datum(sample)
    if not sample.images:
        return datum
    import tinker
    from tinker import TensorData

    n = len(sample.tokens) - 1
    inside = [p for p in sample.images if p.end <= n]  # an image ending the sequence has no target
    targets = np.asarray(datum.loss_fn_inputs["target_tokens"].data, dtype=np.int64).copy()
    for placement in sample.images:
        targets[max(0, placement.offset - 1) : placement.end - 1] = 0
    inputs = {**datum.loss_fn_inputs, "target_tokens": TensorData(targets, "int64", [n])}
    model_input = image_model_input(sample.tokens[:-1], inside, files)
    return tinker.Datum(model_input=model_input, loss_fn_inputs=inputs)


def to_tinker_image_datums(
    samples: Sequence[TrainingSample], store: str | Path
) -> list[tinker.Datum]:
    """Samples (with or without images) as Tinker datums; pixels from ``store``'s files."""
    warn_missing_logprobs(samples, "to_tinker_image_datums")
    files = ImageFiles(store)
    with gc_paused():
        return [sample_to_image_datum(sample, files) for sample in samples]


def received(datum: tinker.Datum) -> list[tuple[int, int, str]]:
    """(offset, count, pixel hash) of each ``ImageChunk`` of a datum's input, as Tinker
    will read it (for ``agentenvs check``'s hand-off comparison)."""
    import tinker

    out, position = [], 0
    for chunk in datum.model_input.chunks:
        if isinstance(chunk, tinker.types.ImageChunk):
            out.append((position, int(chunk.expected_tokens or 0), pixel_hash(decode(chunk.data))))
        position += chunk.length
    return out


def to_cookbook_image_group(group: TrajectoryGroup, store: str | Path) -> Any:
    """Our group as the cookbook's, with each observation's images as ``ImageChunk``s
    (what a cookbook env for a vision model would have produced)."""
    files = ImageFiles(store)
    converted = to_cookbook_group(group)
    for ours, theirs in zip(group.trajectories, converted.trajectories_G, strict=True):
        for transition, cookbook_transition in zip(
            ours.transitions, theirs.transitions, strict=True
        ):
            if transition.images:
                cookbook_transition.ob = image_model_input(transition.ob, transition.images, files)
    return converted
