"""ReTool on the docker sandbox backend, chosen by config from the command line.

Runs ``agentenvs rollout retool --set sandbox.backend=docker ...`` for real, against the
private podman service (Docker-compatible API) of the shared ``podman`` fixture; skipped
with the reason where podman or runc cannot run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from podman_service import require_podman

from agentenvs.sandbox.docker.podman import PodmanService


@pytest.fixture
def podman() -> PodmanService:
    return require_podman()


@pytest.mark.slow
def test_rollout_cli_with_the_docker_backend(podman: PodmanService, tmp_path: Path):
    out = tmp_path / "retool.jsonl"
    command = [
        str(Path(sys.executable).parent / "agentenvs"),
        "rollout",
        "retool",
        "--groups",
        "2",
        "--group-size",
        "2",
        "--out",
        str(out),
        "--set",
        "sandbox.backend=docker",
        "--set",
        f"sandbox.docker_host={podman.docker_host}",
        "--policy-opt",
        "variant=oracle",
        "--json-summary",
        "--no-progress",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["failed"] == 0 and summary["trajectories"] == 4
    assert summary["mean_reward"] == 1.0
    assert summary["stop_reasons"] == {"completed": 4}
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["env_config"]["sandbox"]["backend"] for r in records] == ["docker", "docker"]
    # A clean exit: the shared sandbox was closed with the CLI's event loop.
    assert "Traceback" not in done.stderr
