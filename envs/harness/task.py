"""Harness tasks: a folder per task, in the layout Harbor's tasks use.

::

    fix-calc/
      instruction.md      what the agent is told (required)
      task.toml           [agent] timeout_sec, [verifier] timeout_sec, [environment] memory_mb
      workdir/            the files the agent starts with, copied to /app
      tests/test.sh       the task's own check, run after the agent in a fresh jail (required)
      solution/solve.sh   a reference solution (the oracle)

``instruction.md``, ``task.toml``, ``tests/test.sh`` and ``solution/solve.sh`` mean what
they mean in Harbor: the verifier runs ``bash /tests/test.sh`` with the agent's ``/app``
and writes its reward to ``/logs/verifier/reward.txt`` (a number; ``reward.json`` with
a ``reward`` key is read too); without either, exit status 0 scores 1. Where Harbor
builds a Docker image from ``environment/``, a task here lists the files the agent
starts with in ``workdir/``: a Harbor task maps on by placing there what its Dockerfile
copies into the work dir.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from agentenvs.envs.errors import AgentEnvsError

DEFAULT_AGENT_TIMEOUT = 600.0
DEFAULT_VERIFIER_TIMEOUT = 120.0


class TaskError(AgentEnvsError, ValueError):
    """A task folder that cannot be used; the message names the folder and what is wrong."""


@dataclass(frozen=True)
class HarnessTask:
    name: str
    path: Path
    instruction: str
    agent_timeout: float = DEFAULT_AGENT_TIMEOUT
    verifier_timeout: float = DEFAULT_VERIFIER_TIMEOUT
    memory_mb: int | None = None

    @property
    def workdir(self) -> Path | None:
        folder = self.path / "workdir"
        return folder if folder.is_dir() else None

    @property
    def tests(self) -> Path:
        return self.path / "tests"

    @property
    def solution(self) -> Path | None:
        script = self.path / "solution" / "solve.sh"
        return script if script.is_file() else None


def _number(table: dict, key: str, where: Path) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise TaskError(f"{where}: {key} must be a positive number, got {value!r}")
    return float(value)


def load_task(path: str | Path) -> HarnessTask:
    """The task in folder ``path``."""
    folder = Path(path)
    instruction = folder / "instruction.md"
    if not instruction.is_file():
        raise TaskError(f"{folder}: no instruction.md (is this a task folder?)")
    if not (folder / "tests" / "test.sh").is_file():
        raise TaskError(f"{folder}: no tests/test.sh: nothing would score the agent")
    settings: dict = {}
    toml = folder / "task.toml"
    if toml.is_file():
        try:
            settings = tomllib.loads(toml.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as err:
            raise TaskError(f"{toml}: not TOML ({err})") from None
    agent = settings.get("agent") or {}
    verifier = settings.get("verifier") or {}
    environment = settings.get("environment") or {}
    memory = _number(environment, "memory_mb", toml)
    return HarnessTask(
        name=folder.name,
        path=folder.resolve(),
        instruction=instruction.read_text(encoding="utf-8").strip(),
        agent_timeout=_number(agent, "timeout_sec", toml) or DEFAULT_AGENT_TIMEOUT,
        verifier_timeout=_number(verifier, "timeout_sec", toml) or DEFAULT_VERIFIER_TIMEOUT,
        memory_mb=None if memory is None else int(memory),
    )


def load_tasks(path: str | Path) -> list[HarnessTask]:
    """One task folder, or every task folder directly inside ``path`` (sorted by name)."""
    root = Path(path)
    if not root.is_dir():
        raise TaskError(f"{root}: no such folder of tasks")
    if (root / "instruction.md").is_file():
        return [load_task(root)]
    tasks = [load_task(p) for p in sorted(root.iterdir()) if (p / "instruction.md").is_file()]
    if not tasks:
        raise TaskError(f"{root}: no task folders (each holds an instruction.md)")
    return tasks


def read_reward(logs: Path, returncode: int | None) -> float:
    """The verifier's reward: ``reward.txt``, else ``reward.json``'s ``reward``, else 1.0
    for exit status 0 and 0.0 otherwise; an unreadable reward file scores 0.0."""
    text_file, json_file = logs / "reward.txt", logs / "reward.json"
    try:
        if text_file.is_file():
            return float(text_file.read_text().strip())
        if json_file.is_file():
            return float(json.loads(json_file.read_text())["reward"])
    except (ValueError, KeyError, TypeError, OSError):
        return 0.0
    return 1.0 if returncode == 0 else 0.0
