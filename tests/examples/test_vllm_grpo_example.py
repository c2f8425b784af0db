"""examples/grpo_vllm.py end to end against the session's real vLLM server.

Eight asynchronous GRPO steps on guess_number, the LoRA path: the example pushes
its own starting weights to the server (a verified full reload), streams groups,
trains, and pushes and verifies an adapter after every step. What it wrote must
pass `agentenvs check`, every turn must say which proven weights made it, and no
group may have been trained on more than ``--max-staleness`` versions behind, judged
from the records' own stamps.
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
from agentenvs.rollout.weights.drift import read_drift

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
    # Counted from each sync's proof: an update the probe cannot tell apart counts
    # as indistinguishable, not verified.
    assert summary["verified_syncs"] == STEPS and summary["weights_version"] == STEPS
    first, last = summary["eval_first"], summary["eval_last"]
    assert len(first) == len(last) > 1  # the same seeded episodes, paired
    better = sum(b > a for a, b in zip(first, last, strict=True))
    worse = sum(b < a for a, b in zip(first, last, strict=True))
    assert summary["reward_last"] > summary["reward_first"], (first, last)
    assert better > worse, (better, worse, first, last)  # not one lucky episode


def test_no_group_was_trained_on_more_than_max_staleness_versions_behind(run):
    """Judged from the stored turns' own stamps, not from the stream's counter."""
    summary, _ = run
    records = {r.key: r for r in read_records(summary["store"])}
    consumed = summary["consumed"]
    assert len(consumed) == STEPS * 2  # --groups 2 per step
    worst = 0
    for entry in consumed:
        assert entry["trained_on"] == entry["step"]  # version s is trained at step s
        oldest = records[entry["key"]].sampled_by().version
        assert isinstance(oldest, int) and oldest <= entry["trained_on"], entry
        worst = max(worst, entry["trained_on"] - oldest)
    assert worst <= MAX_STALENESS
    assert summary["max_staleness_seen"] >= worst


def test_every_step_compared_its_batch_with_the_trainer_and_none_alarmed(run):
    """The drift alarm on a clean run: one report per step, each comparing the batch's
    tokens with the trainer's pass under the weights of the version that sampled them
    (the current ones, or the kept previous version's: the loop trains one behind)."""
    summary, _ = run
    reports = read_drift(summary["drift"])
    assert [r.step for r in reports] == list(range(STEPS))
    steps_compared = 0
    for report in reports:
        assert report.alarm is None, report
        compared = [v for v in report.versions if v.on_policy]
        # A step whose every episode straddled a sync has no single-version row (skipped).
        assert compared or report.skipped > 0, report
        steps_compared += bool(compared)
        for version in compared:
            assert 0 <= report.trainer_version - version.version <= MAX_STALENESS
            assert version.tokens > 0 and version.keys
            assert version.max_abs <= report.tolerance.max
    assert steps_compared >= STEPS // 2, reports


def test_every_turn_records_proven_weights_and_check_passes(run):
    summary, out = run
    records = read_records(summary["store"])
    assert records and all(r.status == "ok" for r in records)
    for record in records:
        sampled = record.sampled_by()
        weights = record.provenance["policy"]["weights"]
        assert weights["version"] == sampled.version, record.key  # the claimed version's
        # Version 0 re-pushes the weights the server already had: nothing to tell apart.
        proofs = {"verified", "indistinguishable"} if sampled.version == 0 else {"verified"}
        assert weights["proof"] in proofs, record.key
        for traj in record.group.trajectories:
            for tr in traj.transitions:
                version = tr.logs["policy/weights_version"]
                label = tr.logs["policy/weights"]
                # version 0 is the pushed base; later ones are the step adapters
                expected = r"full:" if version == 0 else rf"lora:agentenvs-\w+-v{version}@"
                assert re.match(expected, label), label
                assert tr.logs["policy/weights_proof"] in (
                    {"verified", "indistinguishable"} if version == 0 else {"verified"}
                )
    assert_check_passes(
        Path(summary["store"]), out / "model", STEPS, STEPS, "--drift", summary["drift"]
    )
