"""The built-in ChatML tokenizer, read from the file shipped with the package, without transformers.

Every ``agentenvs`` command that renders or decodes needs a tokenizer, and the
built-in one used to be a ``transformers.PreTrainedTokenizerFast``: importing
transformers' tokenizer stack pulls in torch, 2-3 s before a command could start
(issue 30). The tokenizer itself is a ``tokenizers`` byte-level BPE plus a Jinja
chat template, so this class serves it from ``builtin_tokenizer.json`` with
``tokenizers`` and ``jinja2`` alone, and answers the part of the Hugging Face
tokenizer interface this project calls (encode, decode, the chat template, the
added and special tokens, the backend). Its ids, decodings, renderings and
provenance fingerprint equal those of the ``PreTrainedTokenizerFast`` built from
the same file (tests/rollout/test_builtin_tokenizer.py compares them); for a
library that needs the real class (TRL, a saved model directory) call
:meth:`ChatMLTokenizer.to_transformers`.

The file is what training in :mod:`agentenvs.rollout.tokenizer` produces,
byte for byte (also tested), so stores written before it was shipped keep their
vocabulary hash.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

BUILTIN_FILE = Path(__file__).with_name("builtin_tokenizer.json")
BUILTIN_VOCAB_SIZE = 2048
BUILTIN_NAME = f"agentenvs-chatml-bpe-{BUILTIN_VOCAB_SIZE}"
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
EXTRA_SPECIAL_TOKENS = ("<|im_start|>",)


@cache
def _template_environment() -> Any:
    """Jinja set up as transformers renders chat templates: sandboxed, blocks trimmed,
    ``loopcontrols``, a ``tojson`` that keeps non-ASCII text, ``raise_exception`` and
    ``strftime_now``; so a template renders here exactly as it does there."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


@cache
def _compiled(template: str) -> Any:
    return _template_environment().from_string(template)


@dataclass(eq=False)
class ChatMLTokenizer:
    """The built-in tokenizer: a ``tokenizers.Tokenizer`` and a ChatML template.

    Compared and hashed by identity (``eq=False``), like a transformers tokenizer: the
    per-tokenizer caches (``envs/tokenizing.py``, ``inspect/decode.py``) key on it."""

    backend_tokenizer: Any
    """The ``tokenizers.Tokenizer`` (normaliser, pre-tokenizer, BPE model, added tokens)."""
    chat_template: str
    name_or_path: str = BUILTIN_NAME
    eos_token: str = EOS_TOKEN
    pad_token: str = PAD_TOKEN
    bos_token: None = None
    unk_token: None = None

    @classmethod
    def from_file(
        cls, path: str | Path = BUILTIN_FILE, *, chat_template: str, name: str = BUILTIN_NAME
    ) -> ChatMLTokenizer:
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(str(path)), chat_template, name)

    # ---- token ids -------------------------------------------------------------------------
    def _id(self, token: str) -> int:
        found = self.backend_tokenizer.token_to_id(token)
        if found is None:
            raise KeyError(f"{token!r} is not in the vocabulary")
        return int(found)

    @property
    def eos_token_id(self) -> int:
        return self._id(self.eos_token)

    @property
    def pad_token_id(self) -> int:
        return self._id(self.pad_token)

    @property
    def bos_token_id(self) -> None:
        return None

    @property
    def all_special_tokens(self) -> list[str]:
        """In transformers' order: the named special tokens, then the extra ones."""
        return [self.eos_token, self.pad_token, *EXTRA_SPECIAL_TOKENS]

    @property
    def all_special_ids(self) -> list[int]:
        return [self._id(token) for token in self.all_special_tokens]

    @property
    def special_tokens_map(self) -> dict[str, str]:
        return {"eos_token": self.eos_token, "pad_token": self.pad_token}

    @property
    def added_tokens_decoder(self) -> dict[int, Any]:
        """Id to ``tokenizers.AddedToken`` (``.content``, ``.special``), as transformers gives."""
        return dict(sorted(self.backend_tokenizer.get_added_tokens_decoder().items()))

    def get_added_vocab(self) -> dict[str, int]:
        return {token.content: i for i, token in self.added_tokens_decoder.items()}

    def get_vocab(self) -> dict[str, int]:
        return dict(self.backend_tokenizer.get_vocab(with_added_tokens=True))

    @property
    def vocab_size(self) -> int:
        return int(self.backend_tokenizer.get_vocab_size(with_added_tokens=False))

    def __len__(self) -> int:
        return int(self.backend_tokenizer.get_vocab_size(with_added_tokens=True))

    def convert_ids_to_tokens(self, ids: int | Iterable[int]) -> Any:
        if isinstance(ids, int):
            return self.backend_tokenizer.id_to_token(ids)
        return [self.backend_tokenizer.id_to_token(int(i)) for i in ids]

    def convert_tokens_to_ids(self, tokens: str | Iterable[str]) -> Any:
        if isinstance(tokens, str):
            return self.backend_tokenizer.token_to_id(tokens)
        return [self.backend_tokenizer.token_to_id(t) for t in tokens]

    # ---- text ------------------------------------------------------------------------------
    def encode(
        self,
        text: str,
        add_special_tokens: bool = True,
        *,
        split_special_tokens: bool = False,
    ) -> list[int]:
        """Token ids of ``text``. ``split_special_tokens`` tokenizes special-token strings
        as plain text, as transformers' option of that name does. This tokenizer has no
        BOS/EOS post-processor, so ``add_special_tokens`` changes nothing (as in
        transformers for it)."""
        backend = self.backend_tokenizer
        previous = backend.encode_special_tokens
        backend.encode_special_tokens = split_special_tokens
        try:
            return list(backend.encode(text, add_special_tokens=add_special_tokens).ids)
        finally:
            backend.encode_special_tokens = previous

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        ids = self.encode(text, add_special_tokens)
        return {"input_ids": ids, "attention_mask": [1] * len(ids)}

    def decode(self, ids: int | Sequence[int], skip_special_tokens: bool = False) -> str:
        tokens = [ids] if isinstance(ids, int) else [int(i) for i in ids]
        return str(self.backend_tokenizer.decode(tokens, skip_special_tokens=skip_special_tokens))

    def apply_chat_template(
        self,
        conversation: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        return_dict: bool = True,
        **template_kwargs: Any,
    ) -> Any:
        """The conversation rendered by the chat template; tokenized unless
        ``tokenize=False``, as ``{"input_ids", "attention_mask"}`` unless
        ``return_dict=False`` (transformers 5's defaults). Extra keyword arguments reach
        the template, after the special-token names, as in transformers."""
        text = _compiled(self.chat_template).render(
            messages=list(conversation),
            tools=None if tools is None else list(tools),
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **{**self.special_tokens_map, **template_kwargs},
        )
        if not tokenize:
            return text
        return self(text, add_special_tokens=False) if return_dict else self.encode(text, False)

    # ---- the real class, and files -------------------------------------------------------------
    def to_transformers(self) -> Any:
        """The same tokenizer as ``transformers.PreTrainedTokenizerFast`` (imports transformers)."""
        from agentenvs.rollout.tokenizer import train_chatml_tokenizer

        fast = train_chatml_tokenizer(chat_template=self.chat_template)
        fast.name_or_path = self.name_or_path
        return fast

    def save_pretrained(self, directory: str | Path) -> tuple[str, ...]:
        """A directory ``AutoTokenizer.from_pretrained`` loads (written by transformers)."""
        return tuple(self.to_transformers().save_pretrained(str(directory)))


def builtin_tokenizer(chat_template: str | None = None) -> ChatMLTokenizer:
    """The shipped tokenizer with the project's ChatML template (or another template)."""
    from agentenvs.rollout.tokenizer import CHATML_TEMPLATE

    return ChatMLTokenizer.from_file(chat_template=chat_template or CHATML_TEMPLATE)
