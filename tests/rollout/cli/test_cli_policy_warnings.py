"""A dead policy server: one warning line per group and a count, not one per retry."""

from __future__ import annotations

import json
import logging
import socket

from typer.testing import CliRunner

from agentenvs.rollout.cli import app


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_retry_warnings_collapse_to_one_line_per_group(tmp_path, caplog) -> None:
    port = _closed_port()
    with caplog.at_level(logging.WARNING, logger="agentenvs.rollout.policies"):
        result = CliRunner().invoke(
            app,
            ["rollout", "guess_number", "--groups", "2", "--group-size", "2",
             "--out", str(tmp_path / "x.jsonl"), "--policy", "openai",
             "--policy-opt", f"url=http://127.0.0.1:{port}", "--policy-opt", "model=m",
             "--policy-opt", "retries=3", "--policy-opt", "backoff=0.001",
             "--retries", "1", "--no-progress", "--json-summary"],
        )  # fmt: skip
    assert result.exit_code == 1, result.stderr
    assert json.loads(result.stdout)["failed"] == 2
    shown = [r.getMessage() for r in caplog.records if r.name.startswith("agentenvs.rollout.pol")]
    assert len(shown) == 2, shown
    assert {m.split(":", 2)[0] + ":" + m.split(":", 2)[1] for m in shown} == {
        "group 0:train/0",
        "group 1:train/1",
    }
    assert all(f"127.0.0.1:{port}" in m for m in shown)
    notes = [line for line in result.stderr.splitlines() if "were not shown" in line]
    assert len(notes) == 1 and "in 2 group(s)" in notes[0]
    dropped = int(notes[0].split("warning: ")[1].split()[0])
    assert dropped > 0
