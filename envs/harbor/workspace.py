"""A Harbor task's file system, carried through the sandbox one command at a time.

Each sandbox run is a fresh, isolated process with a private work dir, and nothing of
it survives (``agentenvs.sandbox``: the model's code is hostile). A Harbor episode
needs its files to persist from one command to the next and into the verifier, so the
work dir travels as a tar archive: each run unpacks the episode's archive into the
work dir, runs the command, and packs the work dir again; the next run gets the new
archive. The sandbox's limits hold for every run (wall time, memory, processes, work
dir size, no network). A command that times out or is killed loses its changes (the
archive of the run before it stays).

Inside the work dir ``ROOT``: ``app/`` is the task's work dir (the Dockerfile's
``WORKDIR``, where its ``COPY``s land), ``tests/``, ``solution/`` and ``logs/`` stand for
Harbor's ``/tests``, ``/solution`` and ``/logs``; the task's own scripts and
instruction have those absolute paths mapped (:func:`~.task.map_paths`).
"""

from __future__ import annotations

import io
import json
import math
import shlex
import tarfile
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from agentenvs.envs.harbor.task import HarborTask, map_paths
from agentenvs.sandbox.base import ExecResult, ExecStatus, Sandbox

STATE = ".state.tar"
COMMAND = ".command.sh"

_RUN = """set +e
root="$PWD"
tar -xf {state} && rm -f {state}
mkdir -p app logs/agent logs/verifier
{exports}
(cd "$root/{cwd}" && bash "$root/{command}")
status=$?
cd "$root" && rm -f {command} && tar -cf {state} --exclude=./{state} . 2>/dev/null
exit $status
"""


@dataclass
class Verdict:
    """What the task's tests said: the reward, all named rewards, and how the run went."""

    reward: float
    rewards: dict[str, float] = field(default_factory=dict)
    status: str = "ok"
    detail: str = ""


@dataclass
class Workspace:
    """One episode's files and the sandbox that runs commands on them."""

    task: HarborTask
    sandbox: Sandbox
    root: str = ""
    state: bytes = b""

    async def open(self) -> None:
        """Learn the sandbox's work dir and lay out the task's starting files."""
        probe = await self.sandbox.run("pwd", language="bash", timeout=30)
        if probe.status != ExecStatus.OK or not probe.stdout.strip().startswith("/"):
            raise RuntimeError(f"the sandbox did not say its work dir: {probe.message!r}")
        self.root = probe.stdout.strip()
        files = {f"app/{_under(dest, self.task.workdir)}": data
                 for dest, data in self.task.copies.items()}  # fmt: skip
        self.state = _pack(files)

    def mapped(self, text: str) -> str:
        return map_paths(text, self.task.workdir, self.root)

    async def run(self, command: str, *, timeout: float, env: dict[str, str] | None = None,
                  extra: dict[str, bytes] | None = None, fetch: tuple[str, ...] = ()
                  ) -> ExecResult:  # fmt: skip
        """Run ``command`` (bash) in the task's work dir; keeps the new files on success."""
        state = self.state if not extra else _add(self.state, extra)
        exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in (env or {}).items())
        script = _RUN.format(state=STATE, command=COMMAND, cwd="app", exports=exports)
        result = await self.sandbox.run(
            script,
            language="bash",
            timeout=timeout,
            files={STATE: state, COMMAND: command.encode()},
            fetch_files=[STATE, *fetch],
        )
        kept = result.files.pop(STATE, None)
        if kept is not None and result.status in (ExecStatus.OK, ExecStatus.ERROR):
            self.state = kept
        return result

    async def verify(self, *, timeout: float) -> Verdict:
        """Copy the tests in, run ``tests/test.sh`` and read the reward it wrote."""
        tests = {f"tests/{k}": self.mapped(v.decode()).encode() if k.endswith(".sh") else v
                 for k, v in self.task.tests.items()}  # fmt: skip
        text_path, json_path = "logs/verifier/reward.txt", "logs/verifier/reward.json"
        result = await self.run(
            f'bash "{self.root}/tests/test.sh"',
            timeout=timeout,
            env=self.task.verifier_env,
            extra=tests,
            fetch=(text_path, json_path),
        )
        detail = (result.stdout[-400:] + result.stderr[-400:]).strip()
        if result.status not in (ExecStatus.OK, ExecStatus.ERROR):
            return Verdict(0.0, status=str(result.status), detail=result.message or detail)
        if json_path in result.files:
            return _json_verdict(result.files[json_path], detail)
        if text_path in result.files:
            try:
                value = float(result.files[text_path].decode().strip())
            except ValueError:
                return Verdict(0.0, status="unreadable_reward", detail=detail)
            if not math.isfinite(value):
                return Verdict(0.0, status="unreadable_reward", detail=detail)
            return Verdict(value, {"reward": value}, detail=detail)
        return Verdict(0.0, status="no_reward_file", detail=detail)


def _json_verdict(raw: bytes, detail: str) -> Verdict:
    try:
        data = json.loads(raw)
    except ValueError:
        return Verdict(0.0, status="unreadable_reward", detail=detail)
    if not isinstance(data, dict):
        return Verdict(0.0, status="unreadable_reward", detail=detail)
    rewards = {k: float(v) for k, v in data.items()
               if isinstance(v, int | float) and not isinstance(v, bool)}  # fmt: skip
    return Verdict(rewards.get("reward", 0.0), rewards, detail=detail)


def _under(dest: str, workdir: str) -> str:
    path = PurePosixPath(dest)
    try:
        return path.relative_to(workdir).as_posix()
    except ValueError:
        return path.as_posix().lstrip("/")  # outside WORKDIR: kept under app/ by its path


def _pack(files: dict[str, bytes]) -> bytes:
    return _add(b"", files)


def _add(state: bytes, files: dict[str, bytes]) -> bytes:
    """``state`` (a tar archive, or nothing) with ``files`` added."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        if state:
            with tarfile.open(fileobj=io.BytesIO(state), mode="r") as old:
                for member in old.getmembers():
                    if member.name.lstrip("./") in files:
                        continue
                    archive.addfile(member, old.extractfile(member) if member.isfile() else None)
        for name, data in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size, info.mode = len(data), 0o755 if name.endswith(".sh") else 0o644
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()
