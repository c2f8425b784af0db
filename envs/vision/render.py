"""Renderers that put images into the token list, exactly as the Qwen-VL templates do.

The Qwen-VL chat templates write an image part as ``<|vision_start|><|image_pad|>
<|vision_end|>`` and the model's processor then repeats ``<|image_pad|>`` once per
merged patch. Here that expansion happens when the image is rendered, with the count
from the model's own processor (:class:`~.processing.ImageProcessing`), and the run's
position is recorded as an :class:`~agentenvs.envs.types.ImagePlacement`; so the
tokens the policy is sent, the ones stored, and the ones a trainer feeds are one list.

How: before the tokenizer's template renders a conversation, every image part
becomes a sentinel string (private-use characters around a per-renderer nonce and the
image's hash, which no environment text can guess), so the template only ever sees
strings and the renderers' usual machinery (environment text tokenized apart from
markup, prefix extension, restarts) runs unchanged. The rendered text is then cut at
the sentinels: the text between them is encoded as before, each sentinel becomes the
vision start token, the placeholder run and the vision end token. The tokenizer
splits text at added tokens anyway, so this is token for token what encoding the
template's own rendering would give.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any

from agentenvs.envs.renderers import (
    Appended,
    ChatRenderer,
    ContinuationRenderer,
    Renderer,
    _append_assistant_text,
    _as_messages,
)
from agentenvs.envs.text import Message
from agentenvs.envs.tokenizer_fingerprint import tokenizer_directory, tokenizer_name
from agentenvs.envs.tokenizing import EncodedText, EnvTextEncoder, Segment, slice_segments
from agentenvs.envs.types import ImagePlacement, ImageRef
from agentenvs.envs.vision.images import ImageError, open_ref
from agentenvs.envs.vision.parts import has_parts, part_items
from agentenvs.envs.vision.processing import (
    QWEN2_VL,
    QWEN3_VL,
    ImageProcessing,
    VisionSpec,
    VisionSpecError,
)

VISION_START = "<|vision_start|>"
IMAGE_PAD = "<|image_pad|>"
VISION_END = "<|vision_end|>"

_OPEN, _CLOSE = "\ue00a", "\ue00b"


@dataclass(frozen=True)
class VisionTokens:
    """The ids a tokenizer gives the Qwen-VL image markup."""

    start: int
    pad: int
    end: int

    @classmethod
    def for_tokenizer(cls, tokenizer: Any) -> VisionTokens:
        controls = EnvTextEncoder.for_tokenizer(tokenizer).controls
        missing = [t for t in (VISION_START, IMAGE_PAD, VISION_END) if t not in controls]
        if missing:
            raise ImageError(
                f"tokenizer {tokenizer_name(tokenizer)} has no {', '.join(missing)} token: it cannot show images "
                "(use a Qwen-VL family tokenizer)"
            )
        return cls(controls[VISION_START], controls[IMAGE_PAD], controls[VISION_END])


def default_spec(tokenizer: Any) -> VisionSpec:
    """The image processor a tokenizer's model uses: the ``preprocessor_config.json``
    saved with it, else the family's published settings by vocabulary (the Qwen3.5
    vocabulary, image pad id 248056, has Qwen3-VL's 16-pixel patches; the Qwen2
    vocabulary Qwen2-VL's 14)."""
    try:
        return VisionSpec.from_pretrained(tokenizer_directory(tokenizer))
    except VisionSpecError:
        pass
    pad = VisionTokens.for_tokenizer(tokenizer).pad
    return QWEN3_VL if pad >= 248_000 else QWEN2_VL


class ImageMarkup:
    """One renderer's images: the sentinels it wrote and what each becomes in tokens."""

    def __init__(self, tokenizer: Any, spec: VisionSpec | None) -> None:
        self.tokenizer = tokenizer
        self._spec = spec
        self._tokens: VisionTokens | None = None
        self._processing: ImageProcessing | None = None
        self.nonce = secrets.token_hex(8)
        self._pattern = re.compile(f"{_OPEN}{self.nonce}:([0-9a-f]{{64}}){_CLOSE}")
        self.images: dict[str, tuple[ImageRef, tuple[int, int, int], int]] = {}
        """hash -> (image, grid, placeholder count), each computed once."""

    @property
    def spec(self) -> VisionSpec:
        if self._spec is None:
            self._spec = default_spec(self.tokenizer)
        return self._spec

    @property
    def tokens(self) -> VisionTokens:
        if self._tokens is None:
            self._tokens = VisionTokens.for_tokenizer(self.tokenizer)
        return self._tokens

    def _prepare(self, image: ImageRef) -> str:
        if image.sha256 not in self.images:
            if self._processing is None:
                self._processing = ImageProcessing.for_key(self.spec.key())
            grid, count = self._processing.grid_and_tokens(open_ref(image))
            self.images[image.sha256] = (image, grid, count)
        return f"{_OPEN}{self.nonce}:{image.sha256}{_CLOSE}"

    def flatten(self, messages: list[Message]) -> list[Message]:
        """Messages with every list of parts joined into one string, images as sentinels
        (the same sentinel for the same image every time, so renderings extend)."""
        if not any(has_parts(m) for m in messages):
            return messages
        self.tokens  # noqa: B018 (a tokenizer that cannot show images fails here, clearly)
        flat = []
        for message in messages:
            if has_parts(message):
                items = part_items(message)
                text = "".join(i if isinstance(i, str) else self._prepare(i) for i in items)
                message = {**message, "content": text}
            flat.append(message)
        return flat

    def shows_images(self, text: str) -> bool:
        return self._pattern.search(text) is not None

    def encode(self, text: EnvTextEncoder, segments: list[Segment]) -> EncodedText:
        """Segments whose text may hold sentinels: the text between them encoded as
        :meth:`EnvTextEncoder.encode_segments` does, each image as its markup."""
        tokens: list[int] = []
        placements: list[ImagePlacement] = []
        split = 0
        run: list[Segment] = []

        def flush() -> None:
            nonlocal split
            encoded = text.encode_segments(run)
            tokens.extend(encoded.tokens)
            split += encoded.split_controls
            run.clear()

        ids = self.tokens
        for piece, kind in segments:
            cursor = 0
            for match in self._pattern.finditer(piece):
                if match.group(1) not in self.images:
                    continue  # not a sentinel this renderer wrote: text like any other
                run.append((piece[cursor : match.start()], kind))
                flush()
                image, grid, count = self.images[match.group(1)]
                tokens.append(ids.start)
                placements.append(
                    ImagePlacement(len(tokens), count, ids.pad, image, grid, self.spec.key())
                )
                tokens.extend([ids.pad] * count)
                tokens.append(ids.end)
                cursor = match.end()
            run.append((piece[cursor:], kind))
        flush()
        return EncodedText(tokens, split, placements)


class _ShowsImages(Renderer):
    """What both vision renderers add: image parts flattened before the template runs,
    sentinels turned into placeholder runs when the rendering is encoded."""

    def __init__(
        self, tokenizer: Any, end_of_turn: list[str] | None = None, spec: VisionSpec | None = None
    ) -> None:
        super().__init__(tokenizer, end_of_turn)
        self.markup = ImageMarkup(tokenizer, spec)

    def _render(
        self, messages: list[Message], tools: list[dict] | None, *, add_generation_prompt: bool
    ) -> str:
        flat = self.markup.flatten(messages)
        return super()._render(flat, tools, add_generation_prompt=add_generation_prompt)

    def encode_conversation(
        self,
        messages: list[Message],
        tools: list[dict] | None,
        *,
        rendered: str | None = None,
        start: int = 0,
    ) -> EncodedText:
        flat = self.markup.flatten(messages)
        if flat is messages:  # no image parts: the renderer as it always was
            return super().encode_conversation(messages, tools, rendered=rendered, start=start)
        if rendered is None:
            rendered = self.render_text(flat, tools, add_generation_prompt=True)
        segments = slice_segments(self._segments(flat, tools, rendered), start)
        return self.markup.encode(self.text, segments)


class VisionChatRenderer(_ShowsImages, ChatRenderer):
    """The chat renderer, with image parts in any message."""

    def append(self, history, tools, action_content, action_marker, observation) -> Appended:
        appended = super().append(history, tools, action_content, action_marker, observation)
        new = _as_messages(observation)
        if any(has_parts(m) for m in new):  # the plain count reads string contents only
            flat = self.markup.flatten(new)
            appended.split_controls = sum(
                self.text.count_controls(m["content"]) for m in flat if m.get("role") != "assistant"
            )
        return appended


class VisionContinuationRenderer(_ShowsImages, ContinuationRenderer):
    """The continuation renderer, with image parts in an observation's message."""

    def append(self, history, tools, action_content, action_marker, observation) -> Appended:
        messages = [] if isinstance(observation, str) else _as_messages(observation)
        flat = self.markup.flatten(messages)
        if flat is messages:
            return super().append(history, tools, action_content, action_marker, observation)
        text = "".join(str(m.get("content", "")) for m in flat)
        _append_assistant_text(history, action_content + text)
        encoded = self.markup.encode(self.text, [(text, "world")])
        return Appended(encoded.tokens, split_controls=encoded.split_controls,
                        images=encoded.images)  # fmt: skip


def vision_renderer(
    kind: str, tokenizer: Any, end_of_turn: list[str] | None = None, spec: VisionSpec | None = None
) -> Renderer:
    """The renderer of ``kind`` able to show images (processor ``spec``, by default the
    tokenizer's model's: :func:`default_spec`, looked up when the first image comes)."""
    classes: dict[str, type[_ShowsImages]] = {
        "chat": VisionChatRenderer,
        "continuation": VisionContinuationRenderer,
    }
    if kind not in classes:
        raise ValueError(f"unknown renderer {kind!r}; choose one of {sorted(classes)}")
    return classes[kind](tokenizer, end_of_turn, spec)


def placeholder_runs(tokens: list[int], pad: int) -> list[tuple[int, int]]:
    """Each maximal run of ``pad`` in ``tokens`` as (offset, length)."""
    import numpy as np

    array = np.asarray(tokens, dtype=np.int64)
    hits = np.flatnonzero(array == pad)
    if hits.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(hits) != 1)
    starts = np.concatenate([[hits[0]], hits[breaks + 1]])
    ends = np.concatenate([hits[breaks], [hits[-1]]])
    return [(int(s), int(e - s + 1)) for s, e in zip(starts, ends, strict=True)]
