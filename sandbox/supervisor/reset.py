"""Deciding whether this worker may run again: the one home of the after-run reset.

Issue classes 1-3 (one run never affecting the next): after a run nothing of it may be
left (``processes``), every writable directory is empty and back at its baseline
(``wipe``), no System V IPC object remains (``leftovers``), and the supervisor's own
priority, scheduling policy, affinity and rlimits are as they were at start-up
(``processes.own_attributes``, issue #24). Anything unproven marks the worker ``dirty``:
it answers ``recycle`` from then on and the host replaces it.
"""

from __future__ import annotations

import os
import time

from .leftovers import POSIX_MQUEUE_DIR, remove_ipc_objects
from .processes import attributes_changed, own_attributes
from .sealing import inspect, private_changes
from .state import WorkerState
from .wipe import ScratchDir


class WorkerReset:
    """Baselines taken at start-up, and the reset that proves a worker is back at them."""

    def __init__(self, state: WorkerState) -> None:
        self.state = state
        self.scratch = [state.workdir, *state.config.get("scratch_dirs", [])]
        self.scratch_dirs: list[ScratchDir] = []
        """The writable directories with their clean baselines (``take_baselines``)."""
        self.attributes: dict = {}
        """The supervisor's own priority, policy, affinity and rlimits when it started."""
        self.reset_problem = ""
        """Why the last reset could not prove the worker clean (empty when it could)."""
        self.needs_cleanup = False
        """The last run was answered before its processes were reaped and dirs wiped."""
        self.dirty = False
        """Cleanup failed: this worker must not run anything else (the host recycles it)."""

    def take_baselines(self, hello: dict) -> None:
        """Every writable directory's baseline while still clean, and our own attributes."""
        paths = list(self.scratch)
        if os.path.isdir(POSIX_MQUEUE_DIR) and os.access(POSIX_MQUEUE_DIR, os.W_OK):
            paths.append(POSIX_MQUEUE_DIR)
        for path in paths:
            scratch = ScratchDir.measure(path)
            if scratch is None:
                hello.setdefault("scratch_errors", []).append(path)
            else:
                self.scratch_dirs.append(scratch)
        self.attributes = own_attributes()

    def seal(self, req: dict) -> dict:
        """Measure what the mounts let a run change, once, before any code runs (issue #40).

        Where the host requires it (``config.seal.require_private``), a worker that
        leaves a run any host inode to change refuses to serve (the host does not start
        it). Until sealed, no request runs code (``Supervisor.serve``).
        """
        paths = [scratch.path for scratch in self.scratch_dirs] + self.scratch
        exposure = inspect(sorted(set(paths)), self.scratch)
        require = (self.state.config.get("seal") or {}).get("require_private", False)
        problem = exposure.start_problem() if require else ""
        answer = {
            "ok": not problem,
            "message": problem,
            "host": sorted(exposure.host),
            "private": sorted(exposure.private),
            "fork_problem": exposure.fork_problem(),
        }
        if not problem:
            self.state.exposure = exposure
        return answer

    def ping(self, req: dict) -> dict:
        """Answered once the previous run's cleanup is done (``after_response`` runs
        before the next request is read); a worker that could not be reset says so here,
        so the host replaces it before a request lands on it (rather than the request
        finding it condemned and waiting for a fresh worker)."""
        if self.needs_cleanup:
            self.finish_cleanup()
        if self.dirty:
            return {"ok": True, "recycle": True, "message": self.reset_problem}
        return {"ok": True}

    def finish_cleanup(self) -> None:
        """Reap what the fast path killed and reset the worker, before anything else runs."""
        self.needs_cleanup = False
        if self.dirty:  # already condemned (the host recycles it): only stop what runs
            self.kill_leftovers()
            return
        self.dirty = not self.reset()

    def reset(self) -> bool:
        """Remove everything an execution could leave for the next one; True once proven."""
        self.reset_problem = ""
        if not self.kill_leftovers():
            # Something still runs: do not walk the directories under its feet.
            self.reset_problem = "processes of the execution could not be killed"
            return False
        for scratch in self.scratch_dirs:
            report = scratch.wipe()
            if not report.clean:
                self.reset_problem = f"{scratch.path}: {report.reason}"
                return False
        ipc = remove_ipc_objects()
        if not ipc.clean:
            self.reset_problem = f"System V IPC objects remain: {ipc.remaining}"
            return False
        exposure = self.state.exposure
        changed = private_changes(exposure.private) if exposure is not None else []
        if changed:
            self.reset_problem = f"the worker's own inodes changed: {', '.join(changed)}"
            return False
        return not self.supervisor_changed()

    def supervisor_changed(self) -> bool:
        """Did anything change this process's priority, policy, affinity or limits?"""
        changed = attributes_changed(self.attributes) if self.attributes else ""
        if changed:
            self.reset_problem = f"the supervisor's own attributes changed: {changed}"
        return bool(changed)

    def too_costly_to_reset(self) -> bool:
        """Cheap look (one ``statvfs`` each) before answering: recycle rather than wipe?

        Issue class 8: a run that leaves more entries than a wipe may visit would push
        the wipe's cost onto the next run; a fresh worker, started off the request path
        by the host, costs the next run nothing.
        """
        return any(scratch.too_big_to_wipe() for scratch in self.scratch_dirs)

    def kill_leftovers(self) -> bool:
        """Kill every process but the sessions' holders; True once none is left."""
        holders = self.state.family.holder_pids()
        if holders:
            return self.state.sweeper.kill_except(holders)
        return self.state.sweeper.kill_all()

    def reap_pending(self) -> None:
        """Reap processes killed before the answer (``pending_reap``)."""
        pending = self.state.pending_reap
        while pending:
            pid = pending.pop()
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:  # not our child (cannot happen in a pid namespace)
                deadline = time.monotonic() + 2.0
                while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                    time.sleep(0.001)
            except OSError:
                pass
