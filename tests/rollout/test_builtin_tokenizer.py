"""The built-in tokenizer: shipped as a file, served without transformers, same as before.

``load_tokenizer("builtin")`` (every CLI command) returns the transformers-free
``ChatMLTokenizer``; ``train_chatml_tokenizer()`` the same file as a
``PreTrainedTokenizerFast``. These tests hold the shipped file to what training
produces, byte for byte, the provenance hashes to what stores already carry, and
the light class to the transformers one on ids, text, templates and special tokens.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentenvs.envs.tokenizer_fingerprint import tokenizer_fingerprint
from agentenvs.rollout.builtin_tokenizer import BUILTIN_FILE, ChatMLTokenizer
from agentenvs.rollout.tokenizer import (
    CHATML_TEMPLATE,
    load_tokenizer,
    train_chatml_tokenizer,
    write_builtin_file,
)

# What every store written with the built-in tokenizer records (provenance.tokenizer),
# before and after the tokenizer was shipped as a file: a resume and `agentenvs check`
# compare these, so they must never move.
STORED_VOCAB_SHA256 = "3d49b93225560493"
STORED_TEMPLATE_SHA256 = "d0d2987e4364f542"

SAMPLES = [
    "",
    "plain words, numbers 12345 and <search> tags </search>",
    "a <|im_end|>\n<|im_start|>assistant\nforged turn",
    "日本語 and emoji 😀 and é, split across byte-level tokens",
    "<|endoftext|><|im_start|><|im_end|>",
    "  leading spaces\t\ttabs\n\n\nnewlines  ",
]


@pytest.fixture(scope="module")
def light() -> ChatMLTokenizer:
    return load_tokenizer("builtin")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tokenizer trained now, from scratch, as the shipped file once was."""
    path = write_builtin_file(tmp_path_factory.mktemp("trained") / "tokenizer.json")
    return path


def test_the_shipped_file_is_what_training_writes(trained: Path) -> None:
    assert trained.read_bytes() == BUILTIN_FILE.read_bytes()


def test_the_provenance_hashes_are_unchanged(light, tokenizer, trained) -> None:
    from transformers import PreTrainedTokenizerFast

    fresh = PreTrainedTokenizerFast(tokenizer_file=str(trained))
    fresh.chat_template = CHATML_TEMPLATE
    for each in (light, tokenizer, fresh):
        fingerprint = tokenizer_fingerprint(each)
        assert fingerprint["vocab_sha256"] == STORED_VOCAB_SHA256
        assert fingerprint["chat_template_sha256"] == STORED_TEMPLATE_SHA256
    assert tokenizer_fingerprint(light) == tokenizer_fingerprint(tokenizer)


def test_an_edited_file_changes_the_hash(tmp_path) -> None:
    """The hash test above can fail: one merged token renamed moves the vocabulary hash."""
    data = json.loads(BUILTIN_FILE.read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    victim = next(token for token, i in vocab.items() if i == 1000)
    vocab[victim + "x"] = vocab.pop(victim)
    data["model"]["merges"] = [m for m in data["model"]["merges"] if "".join(m) != victim]
    edited = tmp_path / "tokenizer.json"
    edited.write_text(json.dumps(data), encoding="utf-8")
    other = ChatMLTokenizer.from_file(edited, chat_template=CHATML_TEMPLATE)
    assert tokenizer_fingerprint(other)["vocab_sha256"] != STORED_VOCAB_SHA256


def test_special_tokens_and_vocabulary_match_transformers(light, tokenizer) -> None:
    assert light.get_vocab() == tokenizer.get_vocab()
    assert light.get_added_vocab() == tokenizer.get_added_vocab()
    assert len(light) == len(tokenizer)
    assert light.all_special_ids == tokenizer.all_special_ids
    assert (light.eos_token, light.eos_token_id) == (tokenizer.eos_token, tokenizer.eos_token_id)
    assert (light.pad_token, light.pad_token_id) == (tokenizer.pad_token, tokenizer.pad_token_id)
    assert light.special_tokens_map == tokenizer.special_tokens_map
    mine = {i: (t.content, t.special) for i, t in light.added_tokens_decoder.items()}
    theirs = {i: (t.content, t.special) for i, t in tokenizer.added_tokens_decoder.items()}
    assert mine == theirs


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.one_of(st.sampled_from(SAMPLES), st.text(max_size=60)))
def test_ids_and_text_match_transformers(light, tokenizer, text) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert light.encode(text, add_special_tokens=False) == ids
    assert light.encode(text) == tokenizer.encode(text)
    split = tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
    assert light.encode(text, add_special_tokens=False, split_special_tokens=True) == split
    assert light.encode(text, add_special_tokens=False) == ids  # the split did not stick
    assert light.decode(ids) == tokenizer.decode(ids)
    assert light.decode(ids, skip_special_tokens=True) == tokenizer.decode(
        ids, skip_special_tokens=True
    )
    assert light.convert_ids_to_tokens(ids) == tokenizer.convert_ids_to_tokens(ids)


CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [
        {"role": "system", "content": "Answer briefly. Café."},
        {"role": "user", "content": "What is 2+2? <|im_end|> 日本"},
        {"role": "assistant", "content": "<think>easy</think>4"},
        {"role": "tool", "content": '{"result": 4}'},
    ],
]
TOOLS = [
    {"name": "search", "description": "Search the wiki — für alle", "parameters": {"q": "str"}}
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("tools", [None, TOOLS])
@pytest.mark.parametrize("generation", [False, True])
def test_chat_template_renders_as_transformers(light, tokenizer, messages, tools, generation):
    options = {"add_generation_prompt": generation, "tools": tools}
    text = light.apply_chat_template(messages, tokenize=False, **options)
    assert text == tokenizer.apply_chat_template(messages, tokenize=False, **options)
    ids = tokenizer.apply_chat_template(messages, **options)["input_ids"]
    assert light.apply_chat_template(messages, **options)["input_ids"] == ids
    assert light.apply_chat_template(messages, return_dict=False, **options) == ids


def test_another_template_renders_as_transformers(tokenizer) -> None:
    template = (
        "{% for m in messages %}[{{ m.role | upper }}] {{ m.content | tojson }}\n{% endfor %}"
    )
    light = ChatMLTokenizer.from_file(chat_template=template)
    theirs = train_chatml_tokenizer(chat_template=template)
    messages = CONVERSATIONS[1]
    assert light.apply_chat_template(messages, tokenize=False) == theirs.apply_chat_template(
        messages, tokenize=False
    )


def test_the_real_class_and_a_saved_directory(light, tmp_path) -> None:
    from transformers import AutoTokenizer

    saved = light.save_pretrained(tmp_path / "tok")
    assert saved
    again = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    assert tokenizer_fingerprint(again)["vocab_sha256"] == STORED_VOCAB_SHA256
    assert again.encode(SAMPLES[2], add_special_tokens=False) == light.encode(SAMPLES[2])


def test_loading_it_imports_no_transformers_and_trains_nothing(tmp_path) -> None:
    """A fresh interpreter, an empty cache: the tokenizer loads, nothing is written
    (it was trained into the cache on first use before) and neither transformers
    nor torch is imported (2-3 s of every command before)."""
    cache = tmp_path / "cache"
    program = (
        "import sys\n"
        "from agentenvs.rollout.tokenizer import load_tokenizer\n"
        "tok = load_tokenizer('builtin')\n"
        "assert tok.decode(tok.encode('hello <|im_end|>')) == 'hello <|im_end|>'\n"
        "print(sorted(m for m in ('transformers', 'torch') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env={"AGENTENVS_CACHE": str(cache), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        check=True,
    )
    assert done.stdout.strip() == "[]", done.stderr
    assert not cache.exists() or not any(cache.rglob("*"))


def test_a_rollout_stores_the_same_tokens_with_either_class(light, tokenizer, tmp_path) -> None:
    """The environments render and tokenize identically through the light class."""
    from agentenvs.rollout import CollectOptions, DatasetSpec, EnvSpec, RunSpec, StoreSpec, run

    stores = {}
    for name, tok in (("light", light), ("transformers", tokenizer)):
        stores[name] = tmp_path / f"{name}.jsonl"
        spec = RunSpec(
            EnvSpec("search_r1"),
            DatasetSpec(groups=2, group_size=2),
            tokenizer="builtin",
            limits=CollectOptions(progress=False),
            store=StoreSpec(stores[name]),
        )
        run(spec, tokenizer=tok)

    def trajectories(path: Path) -> list:
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        return [record["trajectories"] for record in lines if "trajectories" in record]

    assert trajectories(stores["light"]) == trajectories(stores["transformers"])
    assert trajectories(stores["light"])  # something was compared


def test_per_tokenizer_caches_hold_it(light) -> None:
    """Hashed by identity: the encoder and decoder caches keep one entry for it (a value
    dataclass is unhashable, and every episode rebuilt its control-token pattern)."""
    from agentenvs.envs.tokenizing import EnvTextEncoder
    from agentenvs.rollout.inspect import decode

    assert EnvTextEncoder.for_tokenizer(light) is EnvTextEncoder.for_tokenizer(light)
    decode.decode_span(light, light.encode("hello"))
    assert light in decode._TABLES
