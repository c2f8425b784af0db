"""Stores made by real ``agentenvs eval`` runs, for the compare tests (helpers:
support/compare_runs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.compare_runs import evaluate


@pytest.fixture(scope="module")
def oracle_store(tmp_path_factory) -> Path:
    """The scripted oracle on guess_number's first 6 test tasks, 2 trajectories each."""
    out = tmp_path_factory.mktemp("oracle") / "oracle.jsonl"
    evaluate(out, "--tasks", "6", "--group-size", "2")
    return out
