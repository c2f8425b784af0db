"""Token ids to displayable pieces: each span decoded once, tokens mapped to offsets.

A viewer shows every token as its own piece (hover for id and logprob), so it
needs each token's text. Decoding token by token with a few tokens of context
is correct for any tokenizer but costs one ``decode`` per token, which is what
made a 200-group page take a minute. Byte-level BPE tokenizers (GPT-2, Qwen,
DeepSeek, Llama 3, the built-in one) make this cheap: every token is a known
byte string, so the bytes of a span concatenate to its UTF-8 text and token
boundaries become text offsets. Tokens that end inside a multi-byte character
are joined with the next ones into one piece. The result is checked against one
real ``decode`` of the span; any other tokenizer, or a span where the check
fails, takes the per-token path.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

_MAX_PIECE_TOKENS = 8
"""A piece never holds more tokens than this (a run of undecodable bytes ends)."""


@dataclass
class Piece:
    """Decoded text of one token, or of a few tokens that only decode together
    (a multi-byte character split across byte-level tokens)."""

    text: str
    token_ids: list[int]
    logprobs: list[float | None]
    special: bool = False

    def title(self) -> str:
        parts = []
        for token, lp in zip(self.token_ids, self.logprobs, strict=True):
            parts.append(f"id {token}" + ("" if lp is None else f"  logprob {lp:.4f}"))
        return "\n".join(parts)

    @property
    def min_logprob(self) -> float | None:
        values = [lp for lp in self.logprobs if lp is not None]
        return min(values) if values else None


def _byte_decoder() -> dict[str, int]:
    """The byte-level alphabet: printable bytes stand for themselves, the other
    bytes for the code points from 256 upwards, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + extra)] = b
            extra += 1
    return table


_BYTE_DECODER = _byte_decoder()


@dataclass
class _ByteTable:
    """Each token id's bytes, for a byte-level tokenizer; ``None`` where unknown."""

    special: frozenset[int]
    added: dict[int, bytes]
    cache: dict[int, bytes | None]
    begun: dict[int, int] = field(default_factory=dict)
    """Characters each known token begins (its bytes minus UTF-8 continuation bytes)."""
    continues: set[int] = field(default_factory=set)
    """Tokens whose bytes start inside a character (a continuation byte)."""


_TABLES: weakref.WeakKeyDictionary[Any, _ByteTable | None] = weakref.WeakKeyDictionary()


def _byte_table(tokenizer: Any) -> _ByteTable | None:
    try:
        return _TABLES[tokenizer]
    except KeyError:
        pass
    except TypeError:
        return _make_table(tokenizer)
    table = _make_table(tokenizer)
    _TABLES[tokenizer] = table
    return table


def _make_table(tokenizer: Any) -> _ByteTable | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    if type(decoder).__name__ != "ByteLevel" or not hasattr(tokenizer, "convert_ids_to_tokens"):
        return None
    added_tokens = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    added = {int(i): str(getattr(t, "content", t)).encode() for i, t in added_tokens.items()}
    special = frozenset(getattr(tokenizer, "all_special_ids", []) or [])
    return _ByteTable(special, added, {})


def _token_bytes(tokenizer: Any, table: _ByteTable, ids: Sequence[int]) -> list[bytes] | None:
    missing = [i for i in set(ids) if i not in table.cache]
    if missing:
        for token_id, token in zip(missing, tokenizer.convert_ids_to_tokens(missing), strict=True):
            if token_id in table.added:
                found = table.added[token_id]
            elif isinstance(token, str) and all(ch in _BYTE_DECODER for ch in token):
                found = bytes(_BYTE_DECODER[ch] for ch in token)
            else:
                table.cache[token_id] = None
                continue
            table.cache[token_id] = found
            table.begun[token_id] = len(found.translate(None, _CONTINUATION))
            if found and found[0] & 0xC0 == 0x80:
                table.continues.add(token_id)
    found = [table.cache[i] for i in ids]
    return None if any(b is None for b in found) else found  # type: ignore[return-value]


_CONTINUATION = bytes(range(0x80, 0xC0))
"""UTF-8 continuation bytes: a token starting with one continues the previous character."""


@dataclass
class DecodedSpan:
    """A span's text, decoded once, and where each piece ends in it.

    ``ends`` are code-point offsets into ``text``; ``counts`` are tokens per
    piece (``None`` when every piece is one token, the common case)."""

    text: str
    ends: list[int]
    ids: list[int]
    logprobs: list[float | None]
    counts: list[int] | None = None
    special: list[int] = field(default_factory=list)

    def pieces(self) -> list[Piece]:
        pieces = []
        start = token = 0
        specials = set(self.special)
        for index, end in enumerate(self.ends):
            count = self.counts[index] if self.counts is not None else 1
            pieces.append(
                Piece(
                    self.text[start:end],
                    self.ids[token : token + count],
                    self.logprobs[token : token + count],
                    index in specials,
                )
            )
            start, token = end, token + count
        return pieces


def _byte_span(tokenizer: Any, ids: list[int], logprobs: list[float | None]) -> DecodedSpan | None:
    table = _byte_table(tokenizer)
    if table is None:
        return None
    chunks = _token_bytes(tokenizer, table, ids)
    if chunks is None:
        return None
    try:
        text = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:  # bytes that are not UTF-8: leave it to the slow path
        return None
    if text != tokenizer.decode(ids, skip_special_tokens=False):
        return None
    if table.continues.isdisjoint(ids):
        # No token starts inside a character, so every token is its own piece: the
        # offsets are running sums of characters begun (the common case, no Python loop).
        ends = list(accumulate(map(table.begun.__getitem__, ids)))
        special_at = (
            [] if table.special.isdisjoint(ids) else
            [i for i, t in enumerate(ids) if t in table.special]
        )  # fmt: skip
        return DecodedSpan(text, ends, ids, logprobs, None, special_at)
    ends: list[int] = []
    counts: list[int] = []
    special: list[int] = []
    offset = 0
    count = 0
    last = len(chunks) - 1
    for index, chunk in enumerate(chunks):
        offset += len(chunk.translate(None, _CONTINUATION))  # characters begun here
        count += 1
        following = chunks[index + 1] if index < last else b""
        if index == last or not following or following[0] & 0xC0 != 0x80:
            if count == 1 and ids[index] in table.special:
                special.append(len(ends))
            ends.append(offset)
            counts.append(count)
            count = 0
    uniform = all(c == 1 for c in counts)
    return DecodedSpan(text, ends, ids, logprobs, None if uniform else counts, special)


def _contextual_pieces(
    tokenizer: Any, tokens: Sequence[int], logprobs: Sequence[float | None]
) -> list[Piece]:
    """Any tokenizer: each token decoded after a few tokens of left context (so
    tokenizers that drop a leading space on a lone token still show it)."""
    special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])

    def decode(ids: Sequence[int]) -> str:
        return tokenizer.decode(list(ids), skip_special_tokens=False) if ids else ""

    window = 4
    pieces: list[Piece] = []
    pending: list[int] = []
    pending_lp: list[float | None] = []
    start = 0
    for index, (token, lp) in enumerate(zip(tokens, logprobs, strict=True)):
        if not pending:
            start = index
        pending.append(int(token))
        pending_lp.append(lp)
        context = list(tokens[max(0, start - window) : start])
        before = decode(context)
        after = decode(context + pending)
        complete = after.startswith(before) and not after.endswith("\ufffd")
        if complete or len(pending) >= _MAX_PIECE_TOKENS:
            text = after[len(before) :] if after.startswith(before) else decode(pending)
            special = len(pending) == 1 and pending[0] in special_ids
            pieces.append(Piece(text, pending, pending_lp, special))
            pending, pending_lp = [], []
    if pending:
        pieces.append(Piece(decode(pending), pending, pending_lp))
    return pieces


def decode_span(
    tokenizer: Any, tokens: Sequence[int], logprobs: Sequence[float | None] | None = None
) -> DecodedSpan:
    """Decode a span once; pieces (one per token, or per character split across
    tokens) concatenate to the tokenizer's own decoding."""
    ids = [int(t) for t in tokens]
    lps = [None] * len(ids) if logprobs is None else list(logprobs)
    if not ids:
        return DecodedSpan("", [], [], [])
    fast = _byte_span(tokenizer, ids, lps)
    if fast is not None:
        return fast
    pieces = _contextual_pieces(tokenizer, ids, lps)
    ends: list[int] = []
    offset = 0
    for piece in pieces:
        offset += len(piece.text)
        ends.append(offset)
    counts = [len(p.token_ids) for p in pieces]
    return DecodedSpan(
        "".join(p.text for p in pieces),
        ends,
        ids,
        lps,
        None if all(c == 1 for c in counts) else counts,
        [i for i, p in enumerate(pieces) if p.special],
    )


def decode_pieces(
    tokenizer: Any, tokens: Sequence[int], logprobs: Sequence[float | None] | None = None
) -> list[Piece]:
    """Split ``tokens`` into displayable pieces whose texts concatenate to the decoding."""
    return decode_span(tokenizer, tokens, logprobs).pieces()
