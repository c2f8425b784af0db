"""`agentenvs check` on what the real vLLM runs wrote: every check passes, in Python and the CLI.

A random model's sampled tokens are rarely the tokenizer's canonical encoding of
their text; that is correct token-exact data, and `check` must accept it (text
round-trip differences are information, not failures, unless ``--text-trainer``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentenvs.rollout.inspect.check import Check, check_file
from agentenvs.rollout.tokenizer import load_tokenizer


def assert_check_passes(
    store: Path, tokenizer_dir: Path, current_version: int, max_staleness: int, *extra: str
) -> None:
    """``extra``: more CLI options (``--drift FILE``), for the CLI run only."""
    report = check_file(
        store,
        tokenizer=load_tokenizer(str(tokenizer_dir)),
        current_version=current_version,
        max_staleness=max_staleness,
    )
    failures = [f for f in report.findings if f.status == "fail"]
    assert not failures, failures
    assert report.status(Check.COMPLETION_BOUNDARIES) == "pass"
    command = [sys.executable, "-m", "agentenvs.rollout.cli", "check", str(store)]
    command += ["--tokenizer", str(tokenizer_dir), "--current-version", str(current_version)]
    command += ["--max-staleness", str(max_staleness), *extra]
    checked = subprocess.run(command, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
