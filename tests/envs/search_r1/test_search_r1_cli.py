"""``agentenvs retriever`` commands: index, query, and their errors."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from agentenvs.envs.search_r1.cli import app
from agentenvs.envs.search_r1.corpus import default_corpus_path

runner = CliRunner()


def _small_corpus(path):
    lines = default_corpus_path().read_text().splitlines()[:120]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_index_then_query_the_built_index(tmp_path):
    corpus = _small_corpus(tmp_path / "corpus.jsonl")
    out = tmp_path / "idx"
    result = runner.invoke(
        app, ["index", "--backend", "bm25", "--corpus", str(corpus), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert (out / "params.index.json").is_file() and (out / "corpus.jsonl").is_file()
    result = runner.invoke(
        app, ["query", "--index", str(out), "--topk", "2", "Marrowen island towns"]
    )
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout.strip().splitlines()[-1])
    assert row["query"] == "Marrowen island towns" and len(row["hits"]) == 2
    assert row["hits"][0]["contents"].startswith('"Marrowen (island)"')


def test_bad_input_is_a_message_and_exit_code_not_a_traceback(tmp_path):
    result = runner.invoke(
        app, ["index", "--corpus", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 1 and "corpus file not found" in result.output
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": 1, "contents": "x"}\nnot json\n')
    result = runner.invoke(app, ["index", "--corpus", str(broken), "--out", str(tmp_path / "o2")])
    assert result.exit_code == 1 and "broken.jsonl:2" in result.output
    result = runner.invoke(app, ["query", "--index", str(tmp_path), "anything"])
    assert result.exit_code == 1 and "no bm25 index" in result.output
    result = runner.invoke(app, ["index", "--backend", "solr", "--out", str(tmp_path / "o3")])
    assert result.exit_code != 0 and "solr" in result.output
