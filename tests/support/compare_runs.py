"""Running ``agentenvs eval`` and ``compare`` in process, for the compare and eval tests.

Every store here comes from the command itself (in process, through typer's runner),
so what ``compare`` reads is what a user's runs record, not hand-written JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agentenvs.rollout.cli import app

runner = CliRunner()

GUESS_SMALL = ["--set", "low=1", "--set", "high=8", "--set", "limits.max_turns=4",
               "--set", "limits.max_tokens_per_turn=12", "--set", "limits.truncation_reward=-1"]  # fmt: skip
"""guess_number as the grpo example trains it (examples/grpo_torch.py DEMO_GUESS_CONFIG)."""


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def evaluate(out: Path, *args: object) -> dict:
    """``agentenvs eval guess_number ... --out OUT``; its JSON summary."""
    result = invoke("eval", "guess_number", "--out", out, "--json-summary", "--no-progress", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def compare(*args: object):
    """``agentenvs compare ... --json``: (exit code, parsed JSON, stderr)."""
    result = invoke("compare", *args, "--json")
    return result.exit_code, json.loads(result.stdout), result.stderr
