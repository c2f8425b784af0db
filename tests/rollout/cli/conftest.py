"""Fixtures for driving the real ``agentenvs`` command as a user would.

``plugin_site`` writes a tiny installed distribution (a module plus its
``.dist-info`` with an ``agentenvs.envs`` entry point) into a directory; put on
``PYTHONPATH`` it is found through importlib.metadata exactly as a pip-installed
plugin is. Its environments misbehave on purpose: ``buggy`` raises in ``step``,
``splitless`` ignores the split it is given.

``run_cli`` runs the console script in a subprocess, piped or under a
pseudo-terminal (``tty=True``, the ``pty`` module), so what a person sees at a
terminal (progress bars, prompts, Ctrl-C) is what the test reads.
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

AGENTENVS = Path(sys.executable).parent / "agentenvs"

PLUGIN = '''
from typing import ClassVar

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.text import TextEnv, TextStep


class _Env(TextEnv):
    def __init__(self, word):
        self.word = word

    def initial_messages(self):
        return [{"role": "user", "content": "Say " + self.word}]

    def stop_sequences(self):
        return ["</a>"]

    async def step(self, action_text, *, stop_reason):
        return TextStep(reward=1.0, done=True)

    def scripted_action(self, variant="oracle"):
        return "<a>" + self.word + "</a>" if variant == "oracle" else None


class _Buggy(_Env):
    async def step(self, action_text, *, stop_reason):
        table = {}
        return table["oops"]  # the bug a test looks for, on its own line


class BuggyConfig(EnvConfig):
    """Raises KeyError in step."""

    env_name: ClassVar[str] = "buggy"

    def num_tasks(self, split="train"):
        return 3

    def make_text_env(self, task_index, split="train"):
        return _Buggy("w%d" % task_index)


class SplitlessConfig(EnvConfig):
    """Ignores the split it is asked for."""

    env_name: ClassVar[str] = "splitless"

    def num_tasks(self, split="train"):
        return 2

    def make_text_env(self, task_index, split="train"):
        return _Env("train%d" % task_index)
'''

ENTRY_POINTS = """[agentenvs.envs]
buggy = agentenvs_misbehaving:BuggyConfig
splitless = agentenvs_misbehaving:SplitlessConfig
"""


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("plugin_site")
    (site / "agentenvs_misbehaving.py").write_text(PLUGIN)
    info = site / "agentenvs_misbehaving-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: agentenvs-misbehaving\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str
    """Under a pseudo-terminal both streams arrive together, in ``stdout``."""


def cli_env(site: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COLUMNS")}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    env.update(extra)
    return env


def run_cli(
    args: list[str],
    cwd: Path,
    *,
    site: Path | None = None,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> Ran:
    """The console script, piped (stdout and stderr apart)."""
    done = subprocess.run(
        [str(AGENTENVS), *map(str, args)],
        cwd=cwd,
        env={**cli_env(site), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


class Terminal:
    """The console script on a pseudo-terminal of ``columns`` x 40: read what it shows,
    type into it, press Ctrl-C."""

    def __init__(self, args: list[str], cwd: Path, *, site: Path | None, columns: int) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: becomes the command, the pty its terminal
            os.chdir(cwd)
            env = cli_env(site, TERM="xterm", COLUMNS=str(columns), LINES="40")
            env.pop("NO_COLOR", None)
            os.execve(str(AGENTENVS), [str(AGENTENVS), *map(str, args)], env)
        self.output = b""
        self.code: int | None = None

    def read_until(self, predicate: Callable[[str], bool], timeout: float = 120) -> str:
        """Read until ``predicate(text so far)`` holds or the command ends."""
        deadline = time.monotonic() + timeout
        while not predicate(self.text) and time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                self.output += chunk
        return self.text

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def interrupt(self) -> None:
        os.write(self.fd, b"\x03")  # the terminal turns it into SIGINT for the foreground

    def wait(self, timeout: float = 120) -> int:
        self.read_until(lambda _: False, timeout=timeout)
        deadline = time.monotonic() + timeout
        while self.code is None and time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.code = os.waitstatus_to_exitcode(status)
            else:
                time.sleep(0.1)
        if self.code is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            raise TimeoutError(f"command still running after {timeout}s: {self.text[-500:]}")
        os.close(self.fd)
        return self.code

    @property
    def text(self) -> str:
        return self.output.decode("utf-8", "replace")

    @property
    def plain(self) -> str:
        """What is shown, without colour and cursor escape codes."""
        return _ESCAPES.sub("", self.text)


_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def terminal():
    """``terminal(args, cwd, site=None, columns=100)`` starts a :class:`Terminal`."""
    started: list[Terminal] = []

    def start(args, cwd, *, site=None, columns=100) -> Terminal:
        term = Terminal(list(args), cwd, site=site, columns=columns)
        started.append(term)
        return term

    yield start
    for term in started:
        if term.code is None:
            os.kill(term.pid, signal.SIGKILL)
            os.waitpid(term.pid, 0)
