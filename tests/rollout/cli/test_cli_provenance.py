"""Stores written from Python say what made them, and ``view``/``check`` never guess
(issue #46, item 5).

A store written by ``collect()`` from Python used to record only the policy: with a
real vocabulary, ``view`` decoded it with the builtin tokenizer (garbage, no warning)
and ``check`` failed a sound store ("sampled id ... is outside the tokenizer's 2048
ids"). The collector now records the tokenizer (its fingerprint and how to load it
again) from what the group builders describe, and a store that names none is refused
with a request for ``--tokenizer`` instead of being decoded with the builtin one.
"""

from __future__ import annotations

import asyncio

from support.rollout_helpers import EchoPolicy, RecordingBuilder
from typer.testing import CliRunner

from agentenvs.envs import make
from agentenvs.rollout.cli import app
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.tokenizer import train_chatml_tokenizer

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_a_python_store_on_another_vocabulary_is_viewed_and_checked_as_the_cli_s(tmp_path):
    """A vocabulary other than the builtin one (a 1536-token BPE, saved as a local
    tokenizer directory), collected from Python with no provenance handed in: ``view``
    and ``check`` find the tokenizer by themselves and decode the run as rendered."""
    from transformers import AutoTokenizer

    directory = tmp_path / "bpe-1536"
    train_chatml_tokenizer(vocab_size=1536).save_pretrained(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    config = make("guess_number", tasks=2)
    builders = list(config.dataset(tokenizer, group_size=2).builders)
    store = TrajectoryStore(tmp_path / "python.jsonl")
    options = CollectOptions(progress=False)
    asyncio.run(collect(builders, make_policy("scripted"), options, store=store))

    (record, *_) = store.read()
    assert record.provenance["tokenizer"]["spec"] == str(directory)
    assert record.provenance["tokenizer"]["vocab_size"] == 1536
    assert record.provenance["env"]["name"] == "guess_number"
    assert record.provenance["env"]["renderer"] == "chat"
    assert record.provenance["policy"]["kind"] == "scripted"

    shown = invoke("view", store.path, "--no-pager")
    assert shown.exit_code == 0, shown.stderr
    prompt = tokenizer.decode(record.group.trajectories[0].transitions[0].ob)
    assert "higher or lower" in prompt.lower() or "guess" in prompt.lower()
    assert prompt.split("\n")[-2][:40] in shown.stdout  # decoded as rendered, not garbage
    checked = invoke("check", store.path)
    assert checked.exit_code == 0, checked.stdout + checked.stderr


def test_a_store_that_names_no_tokenizer_asks_for_one(tmp_path):
    """Groups whose builders describe no tokenizer: ``view`` and ``check`` say so in one
    line and ask for ``--tokenizer``; given one, they decode with it."""
    store = TrajectoryStore(tmp_path / "bare.jsonl")
    asyncio.run(
        collect([RecordingBuilder()], EchoPolicy(), CollectOptions(progress=False), store=store)
    )
    for command in ("view", "check"):
        result = invoke(command, store.path, *(["--no-pager"] if command == "view" else []))
        assert result.exit_code == 2, (command, result.stdout, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "names no tokenizer" in lines[0], result.stderr
        assert "--tokenizer" in lines[0]
    given = invoke("view", store.path, "--no-pager", "--tokenizer", "builtin")
    assert given.exit_code == 0, given.stderr
