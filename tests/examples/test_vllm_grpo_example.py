"""examples/grpo_vllm.py end to end against the session's real vLLM server.

Eight asynchronous GRPO steps on guess_number, the LoRA path: the example pushes
its own starting weights to the server (a verified full reload), streams groups,
trains, and pushes and verifies an adapter after every step. What it wrote must
pass `agentenvs check`, and every turn must say which verified weights made it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import EXAMPLES
from support.vllm_checks import assert_check_passes
from support.vllm_server import restore_base_weights, vllm_server  # noqa: F401  (the session fixture)

from agentenvs.rollout.collect.store import read_records

pytestmark = pytest.mark.services  # starts a real service

EXAMPLE = EXAMPLES / "grpo_vllm.py"
STEPS, MAX_STALENESS = 8, 1


@pytest.fixture(scope="module")
def run(vllm_server, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("grpo-vllm")
    command = [sys.executable, str(EXAMPLE), "--url", vllm_server.url, "--out", str(out)]
    command += ["--steps", str(STEPS), "--sync", "lora", "--max-staleness", str(MAX_STALENESS)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    finally:
        restore_base_weights(vllm_server)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), out


def test_reward_rises_and_every_sync_is_verified(run):
    summary, _ = run
    assert summary["steps"] == STEPS and summary["sync"] == "lora"
    assert summary["verified_syncs"] == STEPS and summary["weights_version"] == STEPS
    assert summary["reward_last"] > summary["reward_first"], summary["rewards"]
    assert summary["max_staleness_seen"] <= MAX_STALENESS


def test_every_turn_records_verified_weights_and_check_passes(run):
    summary, out = run
    records = read_records(summary["store"])
    assert records and all(r.status == "ok" for r in records)
    for record in records:
        weights = record.provenance["policy"]["weights"]
        assert weights["verified"], record.key
        for traj in record.group.trajectories:
            for tr in traj.transitions:
                version = tr.logs["policy/weights_version"]
                label = tr.logs["policy/weights"]
                # version 0 is the pushed base; later ones are the step adapters
                expected = r"full:" if version == 0 else rf"lora:agentenvs-\w+-v{version}@"
                assert re.match(expected, label), label
    assert_check_passes(Path(summary["store"]), out / "model", STEPS, STEPS)
