"""`agentenvs view` in a terminal (issue 30): run as a person runs it, in a pseudo-terminal
through the real `less`, and piped into a file.

* In a terminal the view is paged by ``less``; Debian sets no ``LESS``, and without
  ``-R`` less prints the colour codes as text (``ESC[1;36m``), so sampled and masked
  tokens looked the same. The command sets ``LESS=FRX`` when it is unset, as git does.
* Piped (no colour), sampled text is marked ``⟦...⟧`` and masked spans are labelled.
* A failed group shows every attempt's error whole, and the traceback when stored.
* Each ``[turn n]`` marker has a line of its own (after an action it read as its label).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentenvs.rollout.cli import app
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.inspect.pager import pager_command, pager_environment
from agentenvs.rollout.inspect.terminal_view import error_lines

runner = CliRunner()
CLI = [sys.executable, "-m", "agentenvs.rollout.cli"]
GUARD_S = 120.0
"""A hang guard for the pseudo-terminal (not a speed check)."""

PAYLOADS = [" ".join(f"w{attempt}x{i}" for i in range(40)) for attempt in (1, 2, 3)]
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/plugins/my_env/env.py", line 42, in step\n'
    "    return self.table[action]\n"
    "KeyError: 'oops'\n"
)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("terminal") / "g.jsonl"
    result = runner.invoke(
        app,
        ["rollout", "guess_number", "--groups", "2", "--group-size", "2", "--out", str(path),
         "--no-progress", "--set", "limits.max_turns=4"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    run = json.loads(path.read_text().splitlines()[0])["run"]
    error = "failed after 3 attempts: " + "; ".join(
        f"attempt {n}: RuntimeError: {payload}" for n, payload in enumerate(PAYLOADS, start=1)
    )
    failed = GroupRecord(
        "zz:broken", "guess_number", "broken", None, status="failed", error=error, attempts=3,
        traceback=TRACEBACK, run=run,
    )  # fmt: skip
    TrajectoryStore(path).append(failed)
    return path


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a Debian login: no LESS, no PAGER, no colour overrides."""
    drop = ("LESS", "PAGER", "NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TERM", "LV")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra)
    return env


def run_in_terminal(argv: list[str], env: dict[str, str], rows: int = 30, cols: int = 120) -> bytes:
    """Run ``argv`` on a pseudo-terminal; press ``q`` whenever output pauses (the pager
    waits for it) until the process exits; return everything it drew."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal's size first, so rich and less see it
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.execve(argv[0], argv, env)
    output = b""
    deadline = time.monotonic() + GUARD_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                os.write(fd, b"q")  # quiet for a second: the pager is waiting
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the other side closed, the process ended
                break
            if not chunk:
                break
            output += chunk
        else:
            raise AssertionError(f"still running after {GUARD_S:g}s: {output[-500:]!r}")
    finally:
        _pid, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, output[-2000:]
    return output


def test_the_pager_shows_colours_not_escape_codes(store) -> None:
    """The real less, LESS unset: colours pass through (``-R``), none printed as text."""
    drawn = run_in_terminal([*CLI, "view", str(store)], clean_env(TERM="xterm-256color"))
    assert b"trajectory 0" in drawn
    # What a person reads: the terminal's own control sequences taken out. Without -R,
    # less writes each escape code as visible text, "ESC" in reverse video then "[1;36m".
    visible = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]", b"", drawn)
    assert b"ESC[" not in visible
    assert b"\x1b[1;36m" in drawn  # the sampled tokens' bold cyan reached the terminal
    assert "⟦".encode() not in drawn  # colour on: no text marks needed


def test_a_user_less_is_kept_and_an_empty_pager_means_none() -> None:
    assert pager_environment({})["LESS"] == "FRX"
    assert pager_environment({"LESS": "-S"})["LESS"] == "-S"
    assert pager_command({"PAGER": "", "PATH": os.environ["PATH"]}) is None
    assert pager_command({"PAGER": "cat"}) is None
    assert pager_command({"PAGER": "most -s"}) == "most -s"
    assert pager_command({"PATH": os.environ["PATH"]}) == "less"


def test_the_pager_gets_git_defaults_through_the_cli(store, tmp_path) -> None:
    """What the pager process receives: its environment and the whole coloured text."""
    seen = tmp_path / "env"
    pager = f"sh -c 'env > {seen}; cat > {tmp_path / 'text'}'"
    run_in_terminal([*CLI, "view", str(store)], clean_env(TERM="xterm", PAGER=pager))
    env = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert env["LESS"] == "FRX"
    text = (tmp_path / "text").read_bytes()
    assert b"\x1b[" in text and b"zz:broken" in text


@pytest.fixture(scope="module")
def piped(store) -> str:
    done = subprocess.run(
        [*CLI, "view", str(store)], capture_output=True, text=True, env=clean_env(), check=True
    )
    return done.stdout


def test_piped_output_marks_sampled_tokens_by_text(store, piped, tokenizer) -> None:
    assert "\x1b[" not in piped
    records = [json.loads(line) for line in store.read_text().splitlines()]
    actions = [
        tokenizer.decode(tr["ac"])
        for record in records
        for traj in record["trajectories"]
        for tr in traj["transitions"]
    ]
    assert actions
    for action in actions:
        assert f"⟦{action}⟧" in piped
    assert piped.count("⟦") == len(actions) + 1  # and the legend's
    assert "«prompt»" in piped and "«env»" in piped
    legend = next(line for line in piped.splitlines() if "⟦sampled⟧" in line)
    assert "«prompt»" in legend and "trained on" in legend
    assert "end-of-turn token <|im_end|>: never sampled here, so it is never trained" in piped


def test_each_turn_marker_has_a_line_of_its_own(piped) -> None:
    lines = [line for line in piped.splitlines() if "[turn " in line]
    assert lines and all(re.fullmatch(r"\[turn \d+\]", line) for line in lines), lines[:5]


def test_a_failed_group_shows_every_attempt_and_the_traceback(piped) -> None:
    squashed = "".join(piped.split())
    for n, payload in enumerate(PAYLOADS, start=1):
        assert f"attempt{n}:RuntimeError:" + "".join(payload.split()) in squashed
    assert "traceback of the last attempt" in piped
    for line in TRACEBACK.splitlines():
        assert line in piped


def test_error_lines_split_attempts() -> None:
    error = "failed after 2 attempts: attempt 1: A: x; y; attempt 2: B: z"
    assert error_lines(error) == [
        "failed after 2 attempts:",
        "  attempt 1: A: x; y",
        "  attempt 2: B: z",
    ]
    assert error_lines("boom\nsecond") == ["boom", "second"]
