"""The tokenizer ``check`` reads a run with, loaded from a serialized fast tokenizer.

Loading a 150k-entry vocabulary through ``transformers.AutoTokenizer`` takes seconds
(importing transformers alone takes two); most of a check's time on a large store
used to be that. A fast tokenizer is a ``tokenizers`` JSON file plus a few names and a
chat template: :class:`DirectoryTokenizer` serves it with ``tokenizers`` and ``jinja2``
alone (the built-in tokenizer's class, ``rollout/builtin_tokenizer.py``, with the
directory's own special tokens), in well under a second. A directory that holds no
``tokenizer.json`` (a slow, sentencepiece-only tokenizer) is converted by transformers
once and its serialized fast tokenizer kept in the cache
(``$AGENTENVS_CACHE/check-vocab``, keyed by the directory's files), so every later
check loads it the fast way. A tokenizer that asks transformers to clean up spaces
when decoding is loaded by transformers, so its decodings stay exactly transformers'.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenvs.rollout.builtin_tokenizer import ChatMLTokenizer

_CONFIG_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)
_NAMED = ("eos_token", "pad_token", "bos_token", "unk_token")


def _content(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it (a string or an AddedToken dict)."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


@dataclass(eq=False)
class DirectoryTokenizer(ChatMLTokenizer):
    """A Hugging Face fast tokenizer directory served without transformers."""

    named: dict[str, str] = field(default_factory=dict)
    """``eos_token``, ``pad_token``, ``bos_token``, ``unk_token``, where the config names them."""
    extra_special: tuple[str, ...] = ()

    @property
    def all_special_tokens(self) -> list[str]:  # type: ignore[override]
        named = [self.named[n] for n in _NAMED if n in self.named]
        return list(dict.fromkeys([*named, *self.extra_special]))

    @property
    def special_tokens_map(self) -> dict[str, str]:  # type: ignore[override]
        return dict(self.named)

    @property
    def bos_token_id(self) -> int | None:  # type: ignore[override]
        return self._id(self.bos_token) if self.bos_token else None

    @property
    def pad_token_id(self) -> int | None:  # type: ignore[override]
        return self._id(self.pad_token) if self.pad_token else None


def _digest(directory: Path) -> str:
    h = hashlib.sha256(str(directory.resolve()).encode())
    for name in _CONFIG_FILES:
        path = directory / name
        if path.is_file():
            stat = path.stat()
            h.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def _cache_root() -> Path:
    root = os.environ.get("AGENTENVS_CACHE") or Path.home() / ".cache" / "agentenvs"
    return Path(root) / "check-vocab"


def _serialized(directory: Path) -> Path | None:
    """The directory's ``tokenizer.json``, or one transformers converts once and the
    cache keeps (None when transformers cannot make a fast tokenizer of it)."""
    own = directory / "tokenizer.json"
    if own.is_file():
        return own
    cached = _cache_root() / _digest(directory) / "tokenizer.json"
    if cached.is_file():
        return cached
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    converted = AutoTokenizer.from_pretrained(str(directory))
    if not isinstance(converted, PreTrainedTokenizerFast):  # no fast tokenizer to keep
        return None
    backend = converted.backend_tokenizer
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_name(f"tokenizer.json.tmp{os.getpid()}")
    backend.save(str(tmp))
    tmp.replace(cached)
    return cached


def _config(directory: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        path = directory / name
        if path.is_file():
            found.update(json.loads(path.read_text(encoding="utf-8")))
    template = directory / "chat_template.jinja"
    if template.is_file():
        found["chat_template"] = template.read_text(encoding="utf-8")
    return found


def load_directory(directory: str | Path) -> Any:
    """A tokenizer directory, the fast way when it can be (module docstring)."""
    return _load_directory(str(Path(directory).expanduser().resolve()), _digest(Path(directory)))


@functools.lru_cache(maxsize=4)
def _load_directory(directory: str, digest: str) -> Any:
    path = Path(directory)
    config = _config(path)
    serialized = None if config.get("clean_up_tokenization_spaces") else _serialized(path)
    if serialized is None:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(directory)
    from tokenizers import Tokenizer

    named = {n: v for n in _NAMED if (v := _content(config.get(n)))}
    extra = config.get("additional_special_tokens") or config.get("extra_special_tokens") or []
    template = config.get("chat_template") or ""
    if isinstance(template, list):  # several named templates: the default one
        template = next((t["template"] for t in template if t.get("name") == "default"), "")
    tokenizer = DirectoryTokenizer(
        Tokenizer.from_file(str(serialized)),
        template,
        name_or_path=directory,
        eos_token=named.get("eos_token", ""),
        pad_token=named.get("pad_token", ""),
        named=named,
        extra_special=tuple(c for t in extra if (c := _content(t))),
    )
    tokenizer.bos_token = named.get("bos_token")  # type: ignore[assignment]
    tokenizer.unk_token = named.get("unk_token")  # type: ignore[assignment]
    return tokenizer


def load_check_tokenizer(spec: str | None) -> Any:
    """``builtin`` (or nothing): the shipped tokenizer; a directory: :func:`load_directory`;
    anything else (a hub id) is handed to transformers."""
    from agentenvs.rollout.tokenizer import load_tokenizer

    if spec in (None, "", "builtin"):
        return load_tokenizer("builtin")
    path = Path(spec).expanduser()
    if path.is_dir():
        return load_directory(path)
    return load_tokenizer(spec)
