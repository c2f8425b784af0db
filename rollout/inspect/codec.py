"""Decode and encode for the checks, straight on the ``tokenizers`` backend.

``check`` decodes every sampled span and re-encodes samples; through transformers'
``decode``/``encode`` a third of that time went to converting arguments
(``to_py_obj`` walks every id) before the Rust backend was reached. A fast tokenizer
(transformers' ``PreTrainedTokenizerFast``, the built-in ``ChatMLTokenizer``, the
check's own cached loader) exposes that backend as ``backend_tokenizer``; this codec
calls it directly, with the same result: transformers' fast ``decode``
is the backend's decode plus an optional clean-up of spaces, which a tokenizer that
asks for it still gets from its own method.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Sequence
from typing import Any

from agentenvs.rollout.builtin_tokenizer import ChatMLTokenizer

_CODECS: weakref.WeakKeyDictionary[Any, Codec] = weakref.WeakKeyDictionary()


def _backend(tokenizer: Any) -> Any:
    """The ``tokenizers`` backend whose decode equals the tokenizer's, or None: ours
    (``ChatMLTokenizer`` and the check's loader) never clean up spaces; a transformers fast
    tokenizer does when asked to (then its own method decodes)."""
    if isinstance(tokenizer, ChatMLTokenizer):
        return tokenizer.backend_tokenizer
    if "transformers" in sys.modules:  # only then can it be one of transformers' own
        from transformers import PreTrainedTokenizerFast

        if (
            isinstance(tokenizer, PreTrainedTokenizerFast)
            and not tokenizer.clean_up_tokenization_spaces
        ):
            return tokenizer.backend_tokenizer
    return None


class Codec:
    """Token ids <-> text under one tokenizer, as ``check`` needs them."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.backend = _backend(tokenizer)

    @classmethod
    def of(cls, tokenizer: Any) -> Codec:
        """One codec per tokenizer (kept while the tokenizer lives)."""
        try:
            found = _CODECS.get(tokenizer)
        except TypeError:  # not weak-referenceable
            return cls(tokenizer)
        if found is None:
            found = _CODECS[tokenizer] = cls(tokenizer)
        return found

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, special tokens kept."""
        if self.backend is not None:
            return str(self.backend.decode(list(ids), skip_special_tokens=False))
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        """Each item's text. One at a time: the backend's batch call wakes a thread pool,
        which costs more than a group's few short spans take to decode (measured:
        about 2 ms a call against 20 us a span)."""
        return [self.decode(ids) for ids in batch]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text, no special tokens added around it."""
        if self.backend is not None:
            return [list(self.backend.encode(t, add_special_tokens=False).ids) for t in texts]
        return [list(self.tokenizer.encode(t, add_special_tokens=False)) for t in texts]
