"""How a command ends: within a bound, with one line per problem (issue #46)."""

from __future__ import annotations

import subprocess
import sys

from conftest import AGENTENVS, cli_env

HANG = 120.0
"""Seconds after which the command counts as hung (a failure, not a measurement)."""

REAPER = """
import ctypes, os, signal, subprocess, sys
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
code = subprocess.run(sys.argv[1:]).returncode
while True:  # what the command left behind is reparented here: stop it, by pid
    try:
        pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    children = [int(p) for p in os.listdir("/proc") if p.isdigit()
                and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1] == str(os.getpid())]
    if not children:
        break
    for child in children:
        os.kill(child, signal.SIGKILL)
    os.waitpid(children[0], 0)
sys.exit(code)
"""
"""Runs the command as a child subreaper: a sandbox worker the command abandoned at
exit (making it die with its driver is the sandbox's own work) is stopped here
instead of outliving the test."""


def test_rollout_retool_without_its_extra_exits(tmp_path):
    """The reported hang (6 of 19 runs): ``math_verify`` (the ``retool`` extra) cannot
    be imported, both groups fail, and the command exits with one error line instead
    of waiting forever for a sandbox worker that was being started."""
    missing = tmp_path / "no-extra" / "math_verify"
    missing.mkdir(parents=True)
    (missing / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'math_verify'\", name='math_verify')\n"
    )
    args = ["rollout", "retool", "--groups", "2", "--group-size", "2", "--json-summary",
            "--out", str(tmp_path / "r.jsonl")]  # fmt: skip
    ran = subprocess.run(
        [sys.executable, "-c", REAPER, str(AGENTENVS), *args],
        cwd=tmp_path, env=cli_env(missing.parent), capture_output=True, text=True,
        timeout=HANG, check=False,
    )  # fmt: skip
    assert ran.returncode == 1, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "No module named 'math_verify'" in lines[0], ran.stderr
