"""The model's image processor: how many placeholder positions an image gets, computed once.

The Qwen-VL family (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5) resizes an image so
each side is a multiple of ``patch_size * merge_size`` and its area lies between
``min_pixels`` and ``max_pixels`` (transformers' ``smart_resize``), cuts it into
``patch_size`` patches (two frames deep: ``temporal_patch_size``), and merges each
``merge_size`` x ``merge_size`` block of patches into one language-model position.
So an image of grid ``(t, h, w)`` patches takes ``t*h*w / merge_size**2`` positions.

:class:`VisionSpec` holds those settings and writes them as one line of text
(:meth:`VisionSpec.key`), which every :class:`~agentenvs.envs.types.ImagePlacement`
records; :class:`ImageProcessing` runs transformers' own image processor (its PIL
backend: no torchvision needed) with them, so the grid and the count come from the
model's processor, once, when the image is rendered. A trainer hand-off rebuilds the
same processor from the recorded key to produce pixel values, and ``agentenvs check``
re-derives the count from the image's size and compares.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from agentenvs.envs.errors import AgentEnvsError

Norm = Literal["clip", "half"]
"""Pixel normalisation: OpenAI CLIP's mean and std (Qwen2-VL, Qwen2.5-VL) or 0.5/0.5
(Qwen3-VL, Qwen3.5)."""
_NORMS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "clip": ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
    "half": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
}


class VisionSpecError(AgentEnvsError, ValueError):
    """Image-processor settings that cannot be read or do not describe a Qwen-VL processor."""


@dataclass(frozen=True)
class VisionSpec:
    """A Qwen-VL image processor's settings: all that decides an image's grid and pixels."""

    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    norm: Norm = "clip"

    def __post_init__(self) -> None:
        for name in ("patch_size", "merge_size", "temporal_patch_size", "min_pixels"):
            if getattr(self, name) < 1:
                raise VisionSpecError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_pixels < self.min_pixels:
            raise VisionSpecError(
                f"max_pixels {self.max_pixels} is below min_pixels {self.min_pixels}"
            )
        if self.norm not in _NORMS:
            raise VisionSpecError(f"norm must be one of {sorted(_NORMS)}, got {self.norm!r}")

    # ---- as recorded ------------------------------------------------------------------
    def key(self) -> str:
        """The settings as one line, the form every image placement records."""
        return "qwen-vl " + " ".join(f"{k}={v}" for k, v in asdict(self).items())

    @classmethod
    def from_key(cls, key: str) -> VisionSpec:
        kind, _, rest = key.partition(" ")
        if kind != "qwen-vl":
            raise VisionSpecError(f"unknown image processor {kind!r} in {key!r}")
        known = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for pair in rest.split():
            name, _, value = pair.partition("=")
            if name not in known:
                raise VisionSpecError(f"unknown setting {name!r} in image processor {key!r}")
            values[name] = value if name == "norm" else int(value)
        return cls(**values)

    # ---- geometry ----------------------------------------------------------------------
    @property
    def factor(self) -> int:
        """Pixels per merged position along each side."""
        return self.patch_size * self.merge_size

    def grid(self, width: int, height: int) -> tuple[int, int, int]:
        """The patch grid ``(t, h, w)`` of an image this size, by transformers' own
        ``smart_resize`` (what the processor does before cutting patches)."""
        resized_h, resized_w = _smart_resize()(
            height,
            width,
            factor=self.factor,
            min_pixels=self.min_pixels,
            max_pixels=self.max_pixels,
        )
        return 1, resized_h // self.patch_size, resized_w // self.patch_size

    def tokens(self, grid: tuple[int, int, int]) -> int:
        """Placeholder positions of an image with this patch grid."""
        t, h, w = grid
        return t * h * w // (self.merge_size * self.merge_size)

    # ---- from a model ----------------------------------------------------------------
    @classmethod
    def from_processor_config(cls, config: dict[str, Any]) -> VisionSpec:
        """The settings of a ``preprocessor_config.json`` of the Qwen-VL family."""
        size = config.get("size") or {}
        mean = tuple(round(float(v), 4) for v in config.get("image_mean") or _NORMS["clip"][0])
        norm: Norm = "half" if mean == (0.5, 0.5, 0.5) else "clip"
        defaults = cls()
        return cls(
            patch_size=int(config.get("patch_size", defaults.patch_size)),
            merge_size=int(config.get("merge_size", defaults.merge_size)),
            temporal_patch_size=int(
                config.get("temporal_patch_size", defaults.temporal_patch_size)
            ),
            min_pixels=int(
                config.get("min_pixels") or size.get("shortest_edge") or defaults.min_pixels
            ),
            max_pixels=int(
                config.get("max_pixels") or size.get("longest_edge") or defaults.max_pixels
            ),
            norm=norm,
        )

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> VisionSpec:
        """The settings saved with a model (its ``preprocessor_config.json``)."""
        path = Path(directory) / "preprocessor_config.json"
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise VisionSpecError(f"cannot read the image processor at {path}: {err}") from None
        return cls.from_processor_config(config)

    def processor_config(self) -> dict[str, Any]:
        """What to save as ``preprocessor_config.json`` for a model using these settings."""
        mean, std = _NORMS[self.norm]
        return {
            "image_processor_type": "Qwen2VLImageProcessor",
            "patch_size": self.patch_size,
            "merge_size": self.merge_size,
            "temporal_patch_size": self.temporal_patch_size,
            "min_pixels": self.min_pixels,
            "max_pixels": self.max_pixels,
            "size": {"shortest_edge": self.min_pixels, "longest_edge": self.max_pixels},
            "image_mean": list(mean),
            "image_std": list(std),
            "do_resize": True,
            "do_rescale": True,
            "do_normalize": True,
            "do_convert_rgb": True,
        }


QWEN2_VL = VisionSpec()
"""Qwen2-VL and Qwen2.5-VL: 14-pixel patches, 2x2 merge, CLIP normalisation."""
QWEN3_VL = VisionSpec(patch_size=16, min_pixels=65536, max_pixels=16777216, norm="half")
"""Qwen3-VL and Qwen3.5: 16-pixel patches, 2x2 merge, 0.5 normalisation."""


@functools.cache
def _smart_resize() -> Any:
    try:  # transformers 5: the PIL backend's module needs no torchvision
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize
    except ImportError:  # transformers 4: the slow processor's module
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize
    return smart_resize


def _processor_class() -> Any:
    try:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
            Qwen2VLImageProcessorPil,
        )

        return Qwen2VLImageProcessorPil
    except ImportError:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

        return Qwen2VLImageProcessor


@dataclass(frozen=True)
class ProcessedImages:
    """What the processor made of some images: the vision tower's inputs."""

    pixel_values: Any
    """``(sum of t*h*w, channels * temporal_patch_size * patch_size**2)`` float tensor."""
    grids: list[tuple[int, int, int]]


class ImageProcessing:
    """transformers' Qwen-VL image processor (PIL backend) configured by a :class:`VisionSpec`."""

    def __init__(self, spec: VisionSpec) -> None:
        self.spec = spec
        mean, std = _NORMS[spec.norm]
        self.processor = _processor_class()(
            patch_size=spec.patch_size,
            merge_size=spec.merge_size,
            temporal_patch_size=spec.temporal_patch_size,
            min_pixels=spec.min_pixels,
            max_pixels=spec.max_pixels,
            image_mean=list(mean),
            image_std=list(std),
        )

    @staticmethod
    @functools.cache
    def for_key(key: str) -> ImageProcessing:
        """One processor per recorded key (hand-offs rebuild it from the records)."""
        return ImageProcessing(VisionSpec.from_key(key))

    def process(self, images: list[Any]) -> ProcessedImages:
        """Pixel values and patch grids of RGB PIL images, in order."""
        if not images:
            raise ValueError("no images to process")
        out = self.processor(images=images, return_tensors="pt")
        grids = [(int(t), int(h), int(w)) for t, h, w in out["image_grid_thw"].tolist()]
        return ProcessedImages(out["pixel_values"], grids)

    def grid_and_tokens(self, image: Any) -> tuple[tuple[int, int, int], int]:
        """The grid the processor gives one image and its placeholder count: the one
        place a count is computed (the result is recorded with the image)."""
        grid = self.process([image]).grids[0]
        expected = self.spec.grid(image.width, image.height)
        if grid != expected:  # the processor and smart_resize must agree, or nothing holds
            raise VisionSpecError(
                f"the image processor gave grid {grid} where smart_resize gives {expected}"
            )
        return grid, self.spec.tokens(grid)
