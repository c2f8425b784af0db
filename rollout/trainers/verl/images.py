"""Samples with images for verl: ``multi_modal_data``, ``multi_modal_inputs`` and M-RoPE positions.

verl's agent loop keeps, per row of its batch, the images in
``non_tensor_batch["multi_modal_data"]`` (``{"images": [PIL images]}``) and the vision
tower's inputs in ``non_tensor_batch["multi_modal_inputs"]`` (``pixel_values``,
``image_grid_thw``, ``images_seqlens``), and for a Qwen-VL model four rows of
position ids per token (the text position, then M-RoPE's temporal, height and width:
``AgentLoopWorker._compute_position_ids``). verl makes ``multi_modal_inputs`` by
decoding the row's token ids back to text and running the processor again; here they
come from the stored pixels through the recorded processor settings
(:func:`~agentenvs.rollout.trainers.images.sample_pixels`), so the grid and count are
the ones the engine used, checked, not re-derived from text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentenvs.rollout.data.samples import TrainingSample
from agentenvs.rollout.trainers.images import (
    merged_count,
    pad_id,
    received_signature,
    sample_pixels,
)


def verl_image_fields(
    samples: Sequence[TrainingSample], store: str | Path
) -> dict[str, np.ndarray]:
    """``multi_modal_data`` and ``multi_modal_inputs`` per row (object arrays, as
    ``DataProto.non_tensor_batch`` holds them), rows in the order of ``samples``."""
    import torch

    data, inputs = [], []
    for sample in samples:
        pixels = sample_pixels(sample, store)
        if not sample.images:
            data.append({})
            inputs.append({})
            continue
        grid = torch.tensor(pixels.grids, dtype=torch.long)
        data.append({"images": pixels.images})
        inputs.append(
            {
                "pixel_values": pixels.pixel_values,
                "image_grid_thw": grid,
                "images_seqlens": torch.repeat_interleave(grid[:, 1] * grid[:, 2], grid[:, 0]),
            }
        )
    return {
        "multi_modal_data": np.array(data, dtype=object),
        "multi_modal_inputs": np.array(inputs, dtype=object),
    }


RopeIndex = Callable[..., tuple[Any, Any]]
"""A Qwen-VL model's ``get_rope_index`` (``model.model.get_rope_index``)."""


def verl_position_ids(
    batch: Mapping[str, Any], fields: Mapping[str, np.ndarray], rope_index: RopeIndex, pad: int
) -> Any:
    """``[B, 4, L]`` position ids as verl lays them out for a Qwen-VL model: row 0 the
    text positions, rows 1-3 the model's M-RoPE positions for the row's images."""
    import torch

    input_ids, attention = batch["input_ids"], batch["attention_mask"]
    rows = []
    for row in range(input_ids.shape[0]):
        ids, mask = input_ids[row : row + 1], attention[row : row + 1]
        text = torch.ones((1, ids.shape[1]), dtype=torch.long)
        valid = mask[0].bool()
        text[0, valid] = torch.arange(int(valid.sum()))
        inputs = fields["multi_modal_inputs"][row]
        if inputs:
            types = (ids == pad).int() * mask
            vision, _ = rope_index(
                ids, mm_token_type_ids=types, image_grid_thw=inputs["image_grid_thw"],
                attention_mask=mask,
            )  # fmt: skip
            vision = vision.transpose(0, 1)
        else:
            vision = text.unsqueeze(1).expand(1, 3, -1)
        rows.append(torch.cat([text.unsqueeze(1), vision], dim=1))
    return torch.cat(rows, dim=0)


def received(
    batch: Mapping[str, Any], fields: Mapping[str, np.ndarray], samples: Sequence[TrainingSample]
) -> list[list[tuple[int, int, str]]]:
    """Per row, (offset from the row's first token, count, pixel hash) of each image as
    verl will feed it: runs in ``input_ids``, counts from ``image_grid_thw`` and the
    merge size, hashes of the PIL images in ``multi_modal_data``."""
    pad = pad_id(samples)
    out: list[list[tuple[int, int, str]]] = []
    for row, sample in enumerate(samples):
        inputs, data = fields["multi_modal_inputs"][row], fields["multi_modal_data"][row]
        if pad is None or not inputs:
            out.append([])
            continue
        key = sample.images[0].processor
        counts = [merged_count(tuple(g), key) for g in inputs["image_grid_thw"].tolist()]
        mask = batch["attention_mask"][row]
        start = int((mask.cumsum(0) == 0).sum())
        tokens = batch["input_ids"][row].tolist()
        out.append(received_signature(tokens, pad, counts, data["images"], start=start))
    return out
