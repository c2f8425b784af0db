"""Run the real ``agentenvs rollout retool`` CLI and check its oracle summary.

Shared by the ReTool backend tests (docker, sandboxfusion): each picks its sandbox with
``--set`` options, and every one must end with the same clean, fully rewarded summary.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

AGENTENVS = str(Path(sys.executable).parent / "agentenvs")


def run_retool_rollout(out: Path, *options: str) -> list[dict[str, Any]]:
    """Roll out 2 groups of 2 with ``options``; assert a clean oracle run; return the records."""
    command = [
        AGENTENVS,
        "rollout",
        "retool",
        "--groups",
        "2",
        "--group-size",
        "2",
        "--out",
        str(out),
        *options,
        "--json-summary",
        "--no-progress",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["failed"] == 0 and summary["trajectories"] == 4
    assert summary["mean_reward"] == 1.0
    assert summary["stop_reasons"] == {"completed": 4}
    # A clean exit: the shared sandbox was closed with the CLI's event loop.
    assert "Traceback" not in done.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]
