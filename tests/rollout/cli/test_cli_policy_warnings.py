"""A failing policy server: one warning line per group and a count, not one per retry.

The server answers (so the pre-run probe passes) but with 503 to every request, the
way an overloaded or half-started server does; each request is then retried."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from agentenvs.rollout.cli import app


class _Unavailable(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        body = b'{"error": "busy"}'
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def unavailable_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Unavailable)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_retry_warnings_collapse_to_one_line_per_group(tmp_path, caplog, unavailable_port) -> None:
    port = unavailable_port
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
