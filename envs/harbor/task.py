"""One Harbor task directory, read: what we take from it and what we leave.

Harbor's layout (its ``src/harbor/models/task`` and ``models/trial/paths.py``)::

    task-name/
      task.toml          configuration ([metadata], [verifier], [agent], [environment], ...)
      instruction.md     the prompt
      environment/       the image's build context (Dockerfile) and its files
      tests/test.sh      the verifier: copied to /tests, run after the agent, writes
                         /logs/verifier/reward.txt (one number) or reward.json (named numbers)
      solution/solve.sh  the reference solution (copied to /solution, run by Harbor's oracle)

Read here: ``instruction.md``; ``task.toml``'s ``verifier.timeout_sec``,
``verifier.env``, ``agent.timeout_sec`` and ``metadata`` (as logging tags); the
Dockerfile's last ``WORKDIR`` and its ``COPY``/``ADD`` lines whose sources lie in
``environment/``; every file of ``tests/`` and ``solution/``. Left out (listed in
:attr:`HarborTask.ignored`, logged with each episode): ``FROM``, ``RUN``, ``ENV`` and
every other instruction (no image is built: there is no registry to pull a base from),
``environment.docker_image``, ``cpus``, ``memory_mb``, ``storage_mb``, ``gpus``,
network settings (the sandbox has no network at all), ``mcp_servers``, ``healthcheck``,
``solution.env`` and multi-step tasks.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from agentenvs.envs.errors import AgentEnvsError

HARBOR_DIRS = ("tests", "solution", "logs")
"""The absolute paths Harbor gives a task beside its work dir: /tests, /solution, /logs."""
DEFAULT_WORKDIR = "/app"
MAX_TASK_BYTES = 8 * 1024 * 1024


class HarborTaskError(AgentEnvsError, ValueError):
    """A task directory that is not a Harbor task we can run; the message says why."""


@dataclass(frozen=True)
class HarborTask:
    """A loaded task (see the module docstring)."""

    name: str
    path: Path
    instruction: str
    config: dict[str, Any]
    workdir: str
    copies: dict[str, bytes]
    """Files of ``environment/`` the Dockerfile copies, by destination (absolute path)."""
    tests: dict[str, bytes]
    solution: dict[str, bytes]
    ignored: tuple[str, ...] = field(default_factory=tuple)

    @property
    def verifier_timeout(self) -> float:
        return float(self.config.get("verifier", {}).get("timeout_sec", 600.0))

    @property
    def verifier_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.config.get("verifier", {}).get("env", {}).items()}

    @property
    def agent_timeout(self) -> float | None:
        value = self.config.get("agent", {}).get("timeout_sec")
        return None if value is None else float(value)

    def tags(self) -> list[str]:
        metadata = self.config.get("metadata", {})
        tags = [str(t) for t in metadata.get("tags", [])]
        for key in ("category", "difficulty"):
            if key in metadata:
                tags.append(f"{key}:{metadata[key]}")
        return tags

    @classmethod
    def load(cls, path: str | Path) -> HarborTask:
        root = Path(path)
        for required in ("task.toml", "instruction.md", "tests/test.sh"):
            if not (root / required).is_file():
                raise HarborTaskError(f"{root}: no {required} (not a Harbor task directory)")
        try:
            config = tomllib.loads((root / "task.toml").read_text())
        except tomllib.TOMLDecodeError as err:
            raise HarborTaskError(f"{root}/task.toml: {err}") from None
        workdir, copies, ignored = _read_dockerfile(root / "environment")
        ignored += _ignored_config(config)
        return cls(
            name=root.name,
            path=root,
            instruction=(root / "instruction.md").read_text(),
            config=config,
            workdir=workdir,
            copies=copies,
            tests=_files(root / "tests"),
            solution=_files(root / "solution"),
            ignored=tuple(ignored),
        )


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative path (a missing folder: none)."""
    if not folder.is_dir():
        return {}
    found = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
             if p.is_file()}  # fmt: skip
    if sum(len(b) for b in found.values()) > MAX_TASK_BYTES:
        raise HarborTaskError(f"{folder}: more than {MAX_TASK_BYTES} bytes of files")
    return found


def _read_dockerfile(context: Path) -> tuple[str, dict[str, bytes], list[str]]:
    dockerfile = context / "Dockerfile"
    if not dockerfile.is_file():
        return DEFAULT_WORKDIR, {}, []
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    workdir, pending, ignored = DEFAULT_WORKDIR, [], []
    for line in text.splitlines():
        words = line.strip().split(None, 1)
        if not words or words[0].startswith("#"):
            continue
        op, rest = words[0].upper(), (words[1] if len(words) > 1 else "")
        if op == "WORKDIR":
            workdir = str(PurePosixPath(workdir) / rest.strip())
        elif op in ("COPY", "ADD") and not rest.startswith("--"):
            parts = shlex.split(rest)
            pending.append((parts[:-1], parts[-1], workdir))
        elif op != "FROM":
            ignored.append(f"Dockerfile {op}")
    copies: dict[str, bytes] = {}
    for sources, target, at in pending:
        for source in sources:
            copies.update(_copy(context, source, str(PurePosixPath(at) / target), target))
    return workdir, copies, sorted(set(ignored))


def _copy(context: Path, source: str, target: str, written: str) -> dict[str, bytes]:
    origin = (context / source).resolve()
    if not origin.is_relative_to(context.resolve()):
        raise HarborTaskError(f"Dockerfile COPY {source}: outside the build context")
    if origin.is_dir():
        return {str(PurePosixPath(target) / k): v for k, v in _files(origin).items()}
    if origin.is_file():
        into_dir = written.endswith("/") or written in (".", "./", "..")
        dest = PurePosixPath(target) / origin.name if into_dir else PurePosixPath(target)
        return {str(dest): origin.read_bytes()}
    raise HarborTaskError(f"Dockerfile COPY {source}: no such file in environment/")


def _ignored_config(config: dict[str, Any]) -> list[str]:
    environment = config.get("environment", {})
    read = {"build_timeout_sec"}
    ignored = [f"environment.{k}" for k in sorted(environment) if k not in read]
    ignored += [f"{section}" for section in ("solution", "steps") if section in config]
    return ignored


def map_paths(text: str, workdir: str, root: str) -> str:
    """``text`` with the task's absolute paths (its work dir, /tests, /solution, /logs)
    moved under the sandbox work dir ``root`` (the local fallback's file system has no
    writable /app or /logs)."""
    prefixes = {workdir: f"{root}/app", **{f"/{d}": f"{root}/{d}" for d in HARBOR_DIRS}}
    pattern = "|".join(re.escape(p) for p in sorted(prefixes, key=len, reverse=True))
    return re.sub(rf"(?<![\w./-])({pattern})(?=/|\b|$)", lambda m: prefixes[m.group(1)], text)
