"""``agentenvs gateway`` as a run that writes a store: it claims the store first."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentenvs.rollout.cli import app
from agentenvs.rollout.collect.store_lock import claim


@pytest.mark.timeout(60)  # without the claim the gateway serves on: a hang is a failure
def test_a_second_writer_of_the_store_is_refused_in_one_line(tmp_path: Path) -> None:
    """Another run holds ``--out``: the gateway refuses before serving (two writers
    would interleave their sessions' records with another run's)."""
    out = tmp_path / "sessions.jsonl"
    with claim(out):  # another run's claim, held by this process
        ran = CliRunner().invoke(
            app,
            ["gateway", "--policy", "openai", "--policy-opt", "url=http://127.0.0.1:9",
             "--out", str(out), "--port", "0"],
        )  # fmt: skip
    assert ran.exit_code == 2, ran.output
    (line,) = ran.output.strip().splitlines()
    assert line.startswith(f"error: {out} is being written by another run")
