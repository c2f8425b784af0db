"""What the commands say about a store (issue #46, items 6 and 9): a store in use by
another run, a full disk, a file that is not a store, the summary's numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from agentenvs.rollout.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


def test_a_second_run_on_a_store_another_run_writes_is_refused_in_one_line(tmp_path):
    """Another process holds the store (as a running ``agentenvs rollout`` does): this
    run is refused before it collects anything, naming that process."""
    out = tmp_path / "shared.jsonl"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from agentenvs.rollout.collect.store_lock import StoreClaim\n"
         f"claim = StoreClaim(__import__('pathlib').Path({str(out)!r})); print('held', flush=True)\n"
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        result = invoke("rollout", "guess_number", "--groups", "2", "--out", out, "--no-progress")
        assert result.exit_code == 2
        line = one_error_line(result)
        assert f"{out} is being written by another run (pid {holder.pid} since" in line
        assert not out.exists()  # nothing collected, nothing written
    finally:
        holder.stdin.close()
        holder.wait(30)
    again = invoke("rollout", "guess_number", "--groups", "2", "--out", out, "--json-summary")
    assert again.exit_code == 0 and json.loads(again.stdout)["ok"] == 2  # free once it ended


def test_a_full_disk_is_one_line(tmp_path):
    """Writes fail as on a full disk (the file-size limit, EFBIG, with 64 groups in
    flight): one error line, not one "Future exception was never retrieved" traceback
    per group that was waiting for the disk."""
    out = tmp_path / "full.jsonl"
    script = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (30000, 30000))\n"
        f"sys.argv = ['agentenvs', 'rollout', 'guess_number', '--groups', '64', '--out', {str(out)!r},"
        " '--json-summary']\n"
        "from agentenvs.rollout.cli import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0] == f"error: {out}: cannot write to the trajectory store: File too large"


def test_view_of_a_file_that_is_not_a_store_says_so(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("a shopping list\nmilk\n")
    line = one_error_line(invoke("view", notes, "--no-pager"))
    assert line == (
        f"error: {notes}: not a trajectory store: none of its 2 lines is a JSON record "
        "(line 1 is not JSON)"
    )
    assert "torn" not in line  # it is not a store a killed run left half written


def test_the_json_summary_rounds_its_numbers(tmp_path):
    """Every episode of the malformed variant scores -1: the mean is -1.0 and the spread
    0.0, not ``-0.9999999999999998`` and ``1.1e-16`` (float sums)."""
    result = invoke(
        "rollout", "guess_number", "--groups", "6", "--group-size", "3", "--json-summary",
        "--policy-opt", "variant=malformed", "--out", tmp_path / "m.jsonl",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["mean_reward"] == -1.0 and summary["reward_std"] == 0.0
    assert "999999" not in result.stdout and "e-1" not in result.stdout
    assert Path(summary["out"]).exists()
