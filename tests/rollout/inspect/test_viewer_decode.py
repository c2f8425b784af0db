"""The page's decoder on real vocabularies: decoding each span once and mapping tokens to
offsets gives exactly what decoding token by token with context gives."""

from __future__ import annotations

import pytest
from support.vocab import shared_vocabulary

from agentenvs.rollout.inspect import decode

TEXTS = [
    "<|im_start|>user\nWhat is 2+2? 日本語のテキスト, emoji 😀🎉 and accents: café naïve<|im_end|>\n",
    "<think>Let me search.</think>\n<search>capital of France</search>",
    "  leading spaces\ttabs\r\nand a lone surrogate-free 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 line",
    # ASCII only, with control tokens: every token its own piece (offsets by running sums).
    "<|im_start|>assistant\n<answer>42</answer><|im_end|>\n<|endoftext|>",
]


@pytest.mark.parametrize("name", ["qwen3", "deepseek-v3"])
def test_byte_level_spans_match_the_per_token_decoder(name) -> None:
    tokenizer = shared_vocabulary(name)
    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        fast = decode._byte_span(tokenizer, ids, [None] * len(ids))
        assert fast is not None, "a byte-level vocabulary takes the fast path"
        slow = decode._contextual_pieces(tokenizer, ids, [None] * len(ids))
        assert fast.text == tokenizer.decode(ids, skip_special_tokens=False)
        assert [p.text for p in fast.pieces()] == [p.text for p in slow]
        assert [p.token_ids for p in fast.pieces()] == [p.token_ids for p in slow]
        assert [p.special for p in fast.pieces()] == [p.special for p in slow]


def test_a_span_that_is_not_utf8_takes_the_per_token_path(tokenizer) -> None:
    """A sampler can stop in the middle of a character: the bytes are then not UTF-8."""
    ids = tokenizer.encode("a日", add_special_tokens=False)[:-1]
    assert decode._byte_span(tokenizer, ids, [None] * len(ids)) is None
    pieces = decode.decode_pieces(tokenizer, ids)
    assert "".join(p.text for p in pieces) == tokenizer.decode(ids)
