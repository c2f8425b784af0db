"""The sessions one worker holds: the one ``session_open`` made and its forks.

Requests name a session by the id this table gave it (``session``, default 0). Every
session of a worker descends from its one ``session_open``: a host sends that only to a
worker it dedicated to one session, so a fork can only ever sit next to its own family,
never next to another tenant's session. The table bounds how many live at once
(``max_sessions``, counted against the worker's process limits by the host), and keeps
the ``forked`` mark that makes every holder read-only (see ``forking``) and, after each
cell, removes the System V IPC objects the cell made (``Holder._settle``): files, memory
and descriptors are handled by the fork itself, the IPC namespace is the worker's.
"""

from __future__ import annotations

import time

from .forking import SCOPED_ABI
from .leftovers import sysv_objects_exist
from .restrictions import READ_ONLY_SECCOMP
from .sessions import Holder
from .state import HeldProcess, WorkerState

DEFAULT_MAX_SESSIONS = 16
"""Live sessions a worker holds at most, unless ``session_open`` says otherwise."""


class SessionTable:
    """Session ids to state holders, and the ``session_*``/``cell`` requests on them."""

    def __init__(self, state: WorkerState) -> None:
        self.state = state
        self.holders = state.family.holders
        """Session id -> its holder (the family's: every sweep spares them)."""
        self.next_id = 0
        self.max_sessions = DEFAULT_MAX_SESSIONS

    def _new_id(self) -> int:
        session_id = self.next_id
        self.next_id += 1
        return session_id

    def _holder(self, req: dict) -> HeldProcess | None:
        session_id = req.get("session", 0)
        if not isinstance(session_id, int) or isinstance(session_id, bool):
            return None
        return self.holders.get(session_id)

    def open(self, req: dict) -> dict:
        """A fresh session; any earlier ones (and their forks) end."""
        for holder in list(self.holders.values()):
            holder.close()
        self.holders.clear()
        self.state.family.forked = False
        max_sessions = req.get("max_sessions")
        if isinstance(max_sessions, int) and max_sessions >= 1:
            self.max_sessions = max_sessions
        session_id = self._new_id()
        self.holders[session_id] = Holder(self.state, req.get("limits", {}))
        return {"ok": True, "session": session_id}

    def fork(self, req: dict) -> dict:
        """Fork a session's holder into a new session of this worker (see ``forking``)."""
        holder = self._holder(req)
        if holder is None:
            return {"ok": False, "message": "no such session"}
        if len(self.holders) >= self.max_sessions:
            return {
                "ok": False,
                "message": f"this worker already holds {len(self.holders)} sessions "
                f"(the limit is {self.max_sessions})",
            }
        state = self.state
        if state.landlock is None or state.landlock.fd < 0 or state.read_only_landlock is None:
            return {"ok": False, "message": "forking needs Landlock, which is not active here"}
        if state.landlock.abi < SCOPED_ABI:
            return {
                "ok": False,
                "message": f"forking needs Landlock ABI {SCOPED_ABI} (signals and abstract "
                f"sockets scoped to a branch); this kernel has ABI {state.landlock.abi}",
            }
        mounts = state.exposure.fork_problem() if state.exposure is not None else "not sealed"
        if mounts:
            return {"ok": False, "message": f"forking needs private mounts: {mounts}"}
        if not READ_ONLY_SECCOMP:
            return {
                "ok": False,
                "message": "forking needs the sandbox's seccomp filter (to keep file modes, "
                "times and xattrs read-only), which is not active here",
            }
        if sysv_objects_exist():
            return {
                "ok": False,
                "message": "System V IPC objects exist in the worker: a fork would share them",
            }
        started = time.monotonic()
        fork = holder.fork()
        if isinstance(fork, str):
            return {"ok": False, "message": fork}  # no fork is left alive (``Holder.fork``)
        state.family.forked = True  # any holder started from now on is read-only too
        fork.seq = holder.seq
        session_id = self._new_id()
        self.holders[session_id] = fork
        return {
            "ok": True,
            "session": session_id,
            "seconds": time.monotonic() - started,
            # where the host puts each branch's memory (``pool/branch_memory.py``)
            "holder": fork.pid,
            "parent_holder": holder.pid,
        }

    def close(self, req: dict) -> dict:
        holder = self._holder(req)
        if holder is None:
            return {"ok": False, "message": "no such session"}
        del self.holders[req["session"]]
        holder.close()
        return {"ok": True}

    def cell(self, req: dict) -> dict:
        holder = self._holder(req)
        if holder is None:
            return {"status": "sandbox_error", "message": "no such session is open"}
        answer = holder.run_cell(req)
        answer["holder"] = holder.pid  # a fresh holder may need its branch's memory group
        return answer
