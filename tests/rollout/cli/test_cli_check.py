"""`agentenvs check` verdicts on the stores a real run leaves: all failed, resumed after
a torn line, failures a rerun fixed, no weights versions, a directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentenvs.rollout.cli import app
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import TrajectoryStore

runner = CliRunner()


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def run_store(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("check") / "g.jsonl"
    result = invoke(
        "rollout", "guess_number", "--groups", "3", "--group-size", "2", "--out", out,
        "--json-summary", "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return out


def _failed(key: str) -> GroupRecord:
    return GroupRecord(key, "guess_number", key, None, status="failed", error="RuntimeError: x")


def details(payload: dict, status: str) -> list[str]:
    return [f["detail"] for f in payload["findings"] if f["status"] == status]


def test_a_store_where_every_group_failed_fails(tmp_path) -> None:
    path = tmp_path / "failed.jsonl"
    for key in ("0:a", "1:b"):
        TrajectoryStore(path).append(_failed(key))
    result = invoke("check", path, "--tokenizer", "builtin")
    assert result.exit_code == 1, result.stdout
    assert "checks failed" in result.stdout and "all checks passed" not in result.stdout
    payload = json.loads(invoke("check", path, "--json").stdout)
    assert not payload["ok"]
    assert "no ok group in 2: nothing to train on" in details(payload, "fail")


def test_max_staleness_without_versions_says_it_cannot_check(run_store) -> None:
    result = invoke("check", run_store, "--max-staleness", "1", "--current-version", "3", "--json")
    assert result.exit_code == 1
    assert "cannot check staleness: no weights version recorded" in details(
        json.loads(result.stdout), "fail"
    )
    plain = invoke("check", run_store)
    assert plain.exit_code == 0, plain.stdout  # without the request it is only a warning


def test_a_directory_is_named_as_one(tmp_path) -> None:
    result = invoke("check", tmp_path)
    assert result.exit_code == 2
    assert f"{tmp_path}: is a directory" in result.stderr


def test_superseded_failures_and_a_torn_middle_line(run_store, tmp_path) -> None:
    """A killed run, then a resume: the torn fragment sits mid-file, and the failure
    written first was fixed by the rerun."""
    lines = run_store.read_text().splitlines()
    first = json.loads(lines[0])
    failed = _failed(first["key"]).to_json()
    failed["run"] = first["run"]
    path = tmp_path / "resumed.jsonl"
    path.write_text(json.dumps(failed) + "\n" + lines[1][:70] + "\n" + "\n".join(lines) + "\n")
    result = invoke("check", path, "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    payload = json.loads(result.stdout)
    assert payload["stats"]["groups"] == 3 and payload["stats"]["failed"] == 0
    assert payload["stats"]["skipped_lines"] == 1
    warnings = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1 and f"{path}:2: skipped a torn line" in warnings[0]

    view = invoke("view", path, "--no-pager")
    assert view.exit_code == 0, view.stderr
    assert "3 (3 ok, 0 failed)" in view.stdout


def test_the_verdict_is_a_table_not_a_dict(run_store) -> None:
    result = invoke("check", run_store)
    assert result.exit_code == 0
    tail = result.stdout[result.stdout.index("all checks passed") :]
    assert "{" not in tail and "'" not in tail
    for label in ("checks pass", "groups", "samples"):
        assert label in tail
