"""Tokenizing environment text so it can never forge a control token.

A tokenizer's added tokens (``<|im_end|>``, ``<|im_start|>``, ``<think>``,
``<tool_call>``, DeepSeek's ``<｜User｜>``, ...) are matched in any text handed to
``encode``. The chat template's own markup relies on that, but observations, tool
output, retrieved passages and game text are written by the world, not by the
template: a program that prints ``<|im_end|>\\n<|im_start|>assistant\\n`` would
otherwise end the tool turn and open an assistant turn in the policy's context.

So text is tokenized as *segments* of three kinds:

* ``markup``, the template's own text: control strings become their tokens;
* ``world``, what the environment observed after the prompt (observations, tool
  output, retrieved passages, game text): no added token is matched at all, not
  even the ones not flagged ``special`` (Qwen's ``</tool_response>`` and
  ``<think>``, DeepSeek's ``<｜User｜>``), since each of them frames a turn in some
  template;
* ``prompt``, the task's prompt messages: the tokens flagged ``special`` are split,
  as transformers' ``split_special_tokens=True`` does, while the others keep their
  ids, because prompts name the protocol's tags (``<tool_call>``, ``<think>``) as the
  model will emit them, the way a serving stack would tokenize that prompt.

When no segment spells a control string it has to split, the result is exactly
``tokenizer.encode`` of the joined text; the slower path runs only for text that
does.
"""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentenvs.envs.types import ImagePlacement

SegmentKind = Literal["markup", "prompt", "world"]
Segment = tuple[str, SegmentKind]
"""A piece of rendered text and who wrote it (see the module docstring)."""

_CACHE: weakref.WeakKeyDictionary[Any, EnvTextEncoder] = weakref.WeakKeyDictionary()


@dataclass
class EncodedText:
    tokens: list[int]
    split_controls: int = 0
    """Control-token strings inside environment text that were tokenized as plain text."""
    images: list[ImagePlacement] = field(default_factory=list)
    """Images shown in ``tokens`` (offsets into them); only image renderers fill it."""


class EnvTextEncoder:
    """Encodes template markup and environment text for one tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        added = tokenizer.get_added_vocab() if hasattr(tokenizer, "get_added_vocab") else {}
        self.controls: dict[str, int] = {text: int(i) for text, i in added.items() if text}
        self.control_ids: frozenset[int] = frozenset(self.controls.values())
        decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        self.special: frozenset[str] = frozenset(
            t.content for t in decoder.values() if getattr(t, "special", False)
        )
        # Longest first, so that at one position the longest control string wins, as in
        # the tokenizer's own added-token matching.
        ordered = sorted(self.controls, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    @classmethod
    def for_tokenizer(cls, tokenizer: Any) -> EnvTextEncoder:
        """One encoder per tokenizer: building the control pattern of a 1k-token added
        vocabulary on every episode would cost more than the episode's rendering."""
        try:
            cached = _CACHE.get(tokenizer)
        except TypeError:  # not weak-referenceable
            return cls(tokenizer)
        if cached is None:
            cached = _CACHE[tokenizer] = cls(tokenizer)
        return cached

    @functools.cached_property
    def vocabulary_size(self) -> int | None:
        """Ids the tokenizer can decode. Computed once: ``len()`` of a large fast
        tokenizer recounts its added vocabulary on every call (~0.1 s for Qwen's)."""
        try:
            return len(self.tokenizer)
        except TypeError:
            return None

    # ---- queries -------------------------------------------------------------------
    def count_controls(self, text: str, kind: SegmentKind = "world") -> int:
        """Control strings in ``text`` that a segment of ``kind`` tokenizes as plain text."""
        if self._pattern is None or not text or kind == "markup":
            return 0
        found = self._pattern.findall(text)
        return len(found) if kind == "world" else sum(1 for f in found if f in self.special)

    def has_control(self, text: str) -> bool:
        return self._pattern is not None and bool(text) and self._pattern.search(text) is not None

    def control_positions(self, tokens: Iterable[int]) -> list[int]:
        ids = self.control_ids
        return [i for i, t in enumerate(tokens) if t in ids]

    # ---- encoding ------------------------------------------------------------------
    def encode_markup(self, text: str) -> list[int]:
        """Template text: control strings become their tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []

    def encode_plain(self, text: str) -> list[int]:
        """Text with every added token disabled: normaliser, pre-tokenizer and the BPE
        model only, which is what ``encode`` does between added-token matches."""
        if not self.has_control(text):
            return self.encode_markup(text)
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None:
            try:
                return list(
                    self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
                )
            except TypeError:
                return self.encode_markup(text)
        if backend.normalizer is not None:
            text = backend.normalizer.normalize_str(text)
        pieces = (
            backend.pre_tokenizer.pre_tokenize_str(text)
            if backend.pre_tokenizer is not None
            else [(text, None)]
        )
        model = backend.model
        return [token.id for piece, _ in pieces for token in model.tokenize(piece)]

    def encode_env(self, text: str) -> EncodedText:
        """Text written wholly by the world (a continuation observation)."""
        return self.encode_segments([(text, "world")])

    def encode_segments(self, segments: Sequence[Segment]) -> EncodedText:
        tokens: list[int] = []
        run: list[str] = []
        dirty = False
        split = 0

        def flush() -> None:
            nonlocal dirty
            text = "".join(run)
            run.clear()
            if text:
                tokens.extend(self.encode_plain(text) if dirty else self.encode_markup(text))
            dirty = False

        for text, kind in segments:
            if not text:
                continue
            if kind == "world" or self._pattern is None:
                found = self.count_controls(text, kind)
                split += found
                dirty = dirty or found > 0
                run.append(text)
                continue
            start = 0
            for match in self._pattern.finditer(text):
                if kind == "prompt" and match.group() in self.special:
                    split += 1
                    dirty = True
                    continue  # stays in the text, tokenized as plain text
                run.append(text[start : match.start()])
                flush()
                tokens.append(self.controls[match.group()])
                start = match.end()
            run.append(text[start:])
        flush()
        return EncodedText(tokens, split)


def slice_segments(segments: Sequence[Segment], start: int) -> list[Segment]:
    """The segments covering ``text[start:]`` of their joined text."""
    out: list[Segment] = []
    offset = 0
    for text, kind in segments:
        end = offset + len(text)
        if end > start:
            out.append((text[max(0, start - offset) :], kind))
        offset = end
    return out
