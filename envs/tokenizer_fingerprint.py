"""Which tokenizer rendered a run: its name, vocabulary hash and chat-template hash.

Two tokenizers with the same name can differ (a re-saved vocabulary, an edited chat
template), and the token ids of a run mean something only under the one that made
them. The fingerprint is recorded with every group (``rollout/data/provenance.py``);
the key is what a run identity, an env server and a remote client compare.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import weakref
from typing import Any


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def chat_template_of(tokenizer: Any) -> str | None:
    """A tokenizer's chat template, or None (some tokenizer classes have no attribute)."""
    return getattr(tokenizer, "chat_template", None) or None


def tokenizer_directory(tokenizer: Any) -> str:
    """Where a Hugging Face tokenizer was loaded from (``name_or_path``), or ``""``."""
    return getattr(tokenizer, "name_or_path", "") or ""


def tokenizer_name(tokenizer: Any) -> str:
    """How messages name a tokenizer: its directory or Hub id, else its class."""
    return tokenizer_directory(tokenizer) or type(tokenizer).__name__


def tokenizer_fingerprint(tokenizer: Any) -> dict[str, Any]:
    """Name, vocabulary hash and chat-template hash of a Hugging Face tokenizer."""
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    ordered = json.dumps(sorted(vocab.items(), key=lambda kv: kv[1]), ensure_ascii=False)
    template = chat_template_of(tokenizer) or ""
    return {
        "name": tokenizer_name(tokenizer),
        "vocab_size": len(vocab),
        "vocab_sha256": _sha256(ordered),
        "chat_template_sha256": _sha256(template) if template else None,
        "eos_token": getattr(tokenizer, "eos_token", None),
    }


_KEYS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def tokenizer_key(tokenizer: Any) -> str | None:
    """Vocabulary and template hashes of a tokenizer (memoised: hashing a large
    vocabulary takes a noticeable fraction of a second, and loops call ``collect`` often)."""
    if tokenizer is None:
        return None
    with contextlib.suppress(KeyError, TypeError):
        return _KEYS[tokenizer] or None
    key = tokenizer_key_from(tokenizer_fingerprint(tokenizer))
    with contextlib.suppress(TypeError):  # not weak-referenceable: hash again next time
        _KEYS[tokenizer] = key or ""
    return key


def tokenizer_key_from(entry: Any) -> str | None:
    """The key of a recorded fingerprint (``provenance["tokenizer"]``), None if it has none."""
    if not isinstance(entry, dict) or not entry.get("vocab_sha256"):
        return None
    template = entry.get("chat_template_sha256")
    return f"vocab {entry['vocab_sha256']}" + (f", template {template}" if template else "")
