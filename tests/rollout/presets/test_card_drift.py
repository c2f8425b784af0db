"""Cards see drift in data and in sampling, on real runs.

Data: a Search-R1 run over a corpus whose every passage was changed, and a ReTool run over
a problem file whose every problem was changed, keep every knob of the preset; only the
content hashes the store records (EnvConfig.data_sources, envs/data_hashes.py) tell them
from the original, and ``agentenvs check --card`` must fail each, naming both hashes.
Sampling: a real sampling policy (the HF policy over a tiny random model) run at another
temperature and a lower per-turn max_tokens than Search-R1's must fail on both, naming
both values each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentenvs.envs.data_hashes import file_digest
from agentenvs.envs.retool.problems import SHIPPED_PROBLEMS
from agentenvs.envs.search_r1.corpus import default_corpus_path
from agentenvs.rollout.collect.store import read_records
from agentenvs.rollout.presets.card import check_store_against_card
from agentenvs.rollout.tokenizer import load_tokenizer

AGENTENVS = str(Path(sys.executable).parent / "agentenvs")


@pytest.fixture
def cli_env(tmp_path) -> dict[str, str]:
    """The bm25 index of an altered corpus is built into this test's own cache."""
    return {**os.environ, "AGENTENVS_CACHE": str(tmp_path / "cache")}


def rollout(env: dict[str, str], out: Path, name: str, preset: str, *args: str) -> Path:
    command = [AGENTENVS, "rollout", name, "--set", f"preset={preset}", "--groups", "1",
               "--group-size", "1", "--out", str(out), "--no-progress", "--json-summary",
               *args]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def card_failures(env: dict[str, str], store: Path, preset: str) -> tuple[int, list[str]]:
    done = subprocess.run(
        [AGENTENVS, "check", str(store), "--card", preset, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    findings = json.loads(done.stdout)["findings"]
    fixed = [f for f in findings if f["check"] == "fixed_input"]
    return done.returncode, [f["detail"] for f in fixed if f["status"] == "fail"]


def altered_copy(source: Path, target: Path, field: str) -> Path:
    """Every record of a JSONL file with ``field`` changed (a word added)."""
    rows = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    for row in rows:
        row[field] = row[field] + " Indeed."
    target.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return target


def test_a_corpus_with_every_passage_altered_fails_the_card(tmp_path, cli_env):
    shipped = default_corpus_path()
    corpus = altered_copy(shipped, tmp_path / "corpus.jsonl", "contents")
    same = rollout(cli_env, tmp_path / "same.jsonl", "search_r1", "search_r1")
    code, failures = card_failures(cli_env, same, "search_r1")
    assert code == 0 and not failures, failures
    moved = tmp_path / "elsewhere" / "corpus.jsonl"  # the same content at another path passes
    moved.parent.mkdir()
    moved.write_bytes(shipped.read_bytes())
    args = ("--set", f"retriever.corpus={moved}")
    code, failures = card_failures(
        cli_env, rollout(cli_env, tmp_path / "moved.jsonl", "search_r1", "search_r1", *args),
        "search_r1",
    )  # fmt: skip
    assert code == 0 and not failures, failures
    args = ("--set", f"retriever.corpus={corpus}")
    drifted = rollout(cli_env, tmp_path / "drifted.jsonl", "search_r1", "search_r1", *args)
    code, failures = card_failures(cli_env, drifted, "search_r1")
    assert code == 1
    want = f"data corpus: {file_digest(corpus)} in the store, {file_digest(shipped)} in the card"
    assert any(d.startswith(want) for d in failures), failures
    assert not any(d.startswith("config differs") for d in failures)  # no knob changed


def test_a_problem_file_with_every_problem_altered_fails_the_card(tmp_path, cli_env):
    problems = altered_copy(SHIPPED_PROBLEMS, tmp_path / "problems.jsonl", "question")
    args = ("--set", f"data_path={problems}")
    drifted = rollout(cli_env, tmp_path / "drifted.jsonl", "retool", "verl_retool", *args)
    code, failures = card_failures(cli_env, drifted, "verl_retool")
    assert code == 1
    theirs, ours = file_digest(problems), file_digest(SHIPPED_PROBLEMS)
    for source in ("problems/train", "problems/eval"):
        want = f"data {source}: {theirs} in the store, {ours} in the card"
        assert any(d.startswith(want) for d in failures), failures


def test_another_temperature_and_a_lower_per_turn_cap_fail_the_card(tmp_path, cli_env):
    from support.rollout_tiny_model import save_tiny_model

    model = save_tiny_model(tmp_path / "tiny", load_tokenizer("builtin"))
    opts = ["--policy", "hf", "--tokenizer", str(model), "--policy-opt", f"model={model}",
            "--policy-opt", "temperature=0.7", "--policy-opt", "top_p=0.95",
            "--policy-opt", "max_tokens=64", "--policy-opt", "seed=1"]  # fmt: skip
    store = rollout(cli_env, tmp_path / "sampled.jsonl", "search_r1", "search_r1", *opts)
    code, failures = card_failures(cli_env, store, "search_r1")
    assert code == 1
    assert "sampling temperature: 0.7 in the store, 1 in the card" in failures
    assert any(
        d.startswith("per-turn max_tokens: 64 in the store, 500 in the card") for d in failures
    )
    assert not any("top_p" in d for d in failures)  # 0.95 is Search-R1's
    records = read_records(store)  # the same store at the original's sampling: no failure
    for record in records:
        record.provenance["sampling"].update(temperature=1.0, max_tokens=500)
    tokenizer = load_tokenizer(str(model))
    found = check_store_against_card(records, "search_r1", tokenizer)
    assert not [d for status, d, _ in found if status == "fail"], found
