"""The Hugging Face policy for vision-language models (the Qwen-VL family).

:class:`VisionSampler` is :class:`~agentenvs.rollout.policies.hf.HFSampler` with
the images of an :class:`~agentenvs.envs.types.ImageObservation` fed to the model's
vision tower. Before the prompt's forward pass it checks the observation against
the model itself, so a count or pixel that would be fed wrong is refused, not
trained on:

* every image was rendered for this model's image processor (the recorded settings
  equal the ``preprocessor_config.json`` saved with the model);
* the placeholder runs found in the tokens are the recorded ones, and no placeholder
  id sits anywhere else;
* each image's bytes decode to the pixels its name says, and the model's processor
  gives it the recorded grid and placeholder count.

The turn is stamped ``policy/images`` with a digest of what the model was given
(the runs found in the tokens, the hashes of the decoded pixels), which
``agentenvs check`` compares with the stored placements. Multimodal RoPE positions
(``get_rope_index``) are computed once per prompt and continued by hand for each
sampled token, so no state of an earlier generation leaks in. The image markup ids
are never sampled (a sampled ``<|image_pad|>`` would make the next context
unrenderable); the logprob reported for each sampled token is still the model's own,
unmasked, so it equals a teacher-forced pass.
"""

from __future__ import annotations

from typing import Any

from agentenvs.envs.types import (
    ImagePlacement,
    TokensWithLogprobs,
    observation_images,
)
from agentenvs.envs.vision.images import ImageError, open_ref
from agentenvs.envs.vision.processing import ImageProcessing, VisionSpec, VisionSpecError
from agentenvs.envs.vision.render import placeholder_runs
from agentenvs.envs.wire import placements_digest
from agentenvs.rollout.policies.base import PolicyError, StampedTokens
from agentenvs.rollout.policies.hf import HFSampler


def is_vision_model(model: Any) -> bool:
    """A Qwen-VL-style model: a vision tower and an image placeholder id in its config."""
    config = model.config
    return config.to_dict().get("image_token_id") is not None and "vision_config" in config


def load_vision_model(path: str, dtype: Any, text_error: Exception) -> Any:
    """A checkpoint that is not a causal LM class: loaded as an image-text-to-text model,
    or the causal LM error stands."""
    from transformers import AutoModelForImageTextToText

    try:
        return AutoModelForImageTextToText.from_pretrained(path, dtype=dtype)
    except (OSError, ValueError) as err:
        raise ValueError(
            f"cannot load {path!r} as a causal LM ({text_error}) nor as a vision-language "
            f"model ({err})"
        ) from err


def sampler_for(model: Any, tokenizer: Any, **options: Any) -> HFSampler:
    """The sampler a model needs: a :class:`VisionSampler` for a vision-language model."""
    if is_vision_model(model):
        return VisionSampler(model, tokenizer, **options)
    return HFSampler(model, tokenizer, **options)


class VisionSampler(HFSampler):
    def __init__(self, model: Any, tokenizer: Any, **options: Any) -> None:
        super().__init__(model, tokenizer, **options)
        config = model.config.to_dict()
        self.context_size = model.config.get_text_config().max_position_embeddings
        self.image_token = int(config["image_token_id"])
        markup = ("vision_start_token_id", "vision_end_token_id", "video_token_id")
        self.never_sample = frozenset(
            [self.image_token, *(int(config[k]) for k in markup if config.get(k) is not None)]
        )
        try:
            self.spec = VisionSpec.from_pretrained(model.name_or_path)
        except VisionSpecError as err:
            raise ValueError(
                f"{err}: a vision-language model needs its image processor's settings "
                "saved beside it"
            ) from None
        self.processing = ImageProcessing(self.spec)
        self._next_position = 0
        self._stamp: dict[str, Any] = {}

    def sees_images(self) -> bool:
        return True

    # ---- the forward passes ------------------------------------------------------------
    def _prefill(self, prompt: list[int], ids: Any) -> Any:
        import torch

        images = observation_images(prompt)
        found = self._checked_runs(prompt, images)
        inputs: dict[str, Any] = {}
        if images:
            pixels = self._pixels(images)
            types = torch.zeros_like(ids, dtype=torch.int)
            for placement in images:
                types[0, placement.offset : placement.end] = 1
            grids = torch.tensor([p.grid for p in images], dtype=torch.long)
            positions, delta = self.model.model.get_rope_index(
                ids, mm_token_type_ids=types, image_grid_thw=grids
            )
            inputs = {"pixel_values": pixels, "image_grid_thw": grids, "mm_token_type_ids": types}
            self._next_position = len(prompt) + int(delta.reshape(-1)[0])
            self._stamp = {"images": placements_digest(found), "image_tokens": len(found)}
        else:
            positions = torch.arange(len(prompt)).view(1, 1, -1).expand(3, 1, -1)
            self._next_position = len(prompt)
            self._stamp = {}
        return self.model(input_ids=ids, position_ids=positions, use_cache=True, **inputs)

    def _decode(self, step: Any, past: Any) -> Any:
        import torch

        position = torch.full((3, 1, 1), self._next_position, dtype=torch.long)
        self._next_position += 1
        return self.model(
            input_ids=step, past_key_values=past, position_ids=position, use_cache=True
        )

    def _answer(self, prompt: list[int], out: TokensWithLogprobs) -> TokensWithLogprobs:
        if not self._stamp:
            return out
        return StampedTokens(out.tokens, out.logprobs, out.stop_reason, stamp=dict(self._stamp))

    # ---- the checks --------------------------------------------------------------------
    def _checked_runs(
        self, prompt: list[int], images: tuple[ImagePlacement, ...]
    ) -> list[ImagePlacement]:
        """The placeholder runs in ``prompt`` as placements (with the recorded images),
        refused unless they are exactly the recorded ones."""
        runs = placeholder_runs(prompt, self.image_token)
        expected = [(p.offset, p.tokens) for p in images]
        if runs != expected:
            raise PolicyError(
                f"the observation's placeholder runs (offset, length) {runs[:4]} are not "
                f"its recorded images {expected[:4]}"
            )
        key = self.spec.key()
        for placement in images:
            if placement.processor != key or placement.pad != self.image_token:
                raise PolicyError(
                    f"an image was rendered for processor {placement.processor!r} with "
                    f"placeholder {placement.pad}; this model uses {key!r} and "
                    f"{self.image_token}"
                )
        return list(images)

    def _pixels(self, images: tuple[ImagePlacement, ...]) -> Any:
        try:
            decoded = [open_ref(p.image) for p in images]
        except ImageError as err:
            raise PolicyError(f"an image of the observation cannot be shown: {err}") from None
        processed = self.processing.process(decoded)
        for placement, grid in zip(images, processed.grids, strict=True):
            count = self.spec.tokens(grid)
            if grid != placement.grid or count != placement.tokens:
                raise PolicyError(
                    f"the model's processor gives image {placement.image.sha256[:12]} grid "
                    f"{grid} ({count} positions); the observation recorded {placement.grid} "
                    f"({placement.tokens})"
                )
        return processed.pixel_values
