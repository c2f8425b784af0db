"""ReTool on the docker sandbox backend, chosen by config from the command line.

Runs ``agentenvs rollout retool --set sandbox.backend=docker ...`` for real, against the
private podman service (Docker-compatible API) of the shared ``podman`` fixture; skipped
with the reason where podman or runc cannot run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.podman_service import require_podman
from support.retool_cli_helpers import run_retool_rollout

from agentenvs.sandbox.backends.docker.podman import PodmanService

pytestmark = pytest.mark.services  # starts a real service


@pytest.fixture
def podman() -> PodmanService:
    return require_podman()


def test_rollout_cli_with_the_docker_backend(podman: PodmanService, tmp_path: Path):
    records = run_retool_rollout(
        tmp_path / "retool.jsonl",
        "--set",
        "sandbox.backend=docker",
        "--set",
        f"sandbox.docker_host={podman.docker_host}",
        "--policy-opt",
        "variant=oracle",
    )
    assert [r["env_config"]["sandbox"]["backend"] for r in records] == ["docker", "docker"]
