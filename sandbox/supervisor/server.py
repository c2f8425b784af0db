"""The warm supervisor that runs *inside* a sandbox worker: its request loop.

This package is shipped into the sandbox as source (see ``bundle.py``) and executed by
the sandboxed interpreter (Debian's ``/usr/bin/python3`` for the local backend, the
image's Python for Docker), which cannot import agentenvs. Only the standard library is
used.

Why it exists: starting an interpreter and importing numpy + sympy costs ~0.6 s; a
``fork()`` of an interpreter that already did costs ~3 ms. The supervisor pre-imports
(and warms up sympy's lazy imports and caches: ``startup``), then serves requests with
one fresh child per execution, forked ahead of time while the host reads the previous
answer (``runs``). Each child drops what it may do (``restrictions``), runs the code
with its output on capped pipes (``usercode``, ``outcome``), and is killed together with
everything it started when it ends, times out or floods its output (``processes``); then
the worker is proven clean or condemned (``reset``, ``wipe``).

Wire protocol, on the supervisor's stdin/stdout (frames: 4-byte big-endian length, then
UTF-8 JSON):

1. Optional bootstrap (see ``BOOTSTRAP`` in the host package): the interpreter is started
   with ``-c BOOTSTRAP`` and the first frame is the bundled source, raw bytes.
2. Config frame (host -> supervisor): ``python_path``, ``preload``, ``warmup``, ``workdir``,
   ``scratch_dirs``, ``seccomp_bpf`` (base64 of a classic-BPF program or null),
   ``seccomp_stages`` (``{"children": ..., "read_only": ...}``, base64 programs stacked
   later: by every child, by every holder of a family that forked),
   ``landlock`` (``{"read": [...], "write": [...], "write_files": [...]}`` or null),
   ``landlock_scope_signals``, ``subreaper``, ``pid_namespace``,
   ``seal`` (``{"require_private": bool}``: refuse to serve where a run could change a
   host inode).
3. ``hello`` event (supervisor -> host; with ``fatal`` when a restriction the host asked
   for could not be applied: nothing is served), then one response per request:
   ``seal`` (``reset``; first, before anything runs code), ``probe`` (``self_check``),
   ``run`` (``runs``), ``session_open``, ``session_fork``, ``session_close``, ``cell``
   (``session_table``), ``ping`` (``reset``), ``exit``.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback

from .frames import dup_high, read_frame, write_frame
from .processes import Sweeper
from .reset import WorkerReset
from .restrictions import SUPERVISOR_NAME, set_name
from .runs import StatelessRuns
from .self_check import probe
from .session_table import SessionTable
from .startup import confine_supervisor, enter_workdir, load_libraries, settle_heap
from .state import WorkerState

SWEEPING_OPS = ("probe", "session_open")
"""Requests that sweep every process but the supervisor (the pre-forked child goes first)."""
SEALED_OPS = ("probe", "run", "session_open", "session_fork", "cell")
"""Requests that run code: refused until the worker is sealed (``WorkerReset.seal``)."""


class Supervisor:
    """Reads requests, hands each to the module whose job it is, answers in turn."""

    def __init__(self, proto_in: int, proto_out: int, config: dict) -> None:
        self.proto_in = proto_in
        self.proto_out = proto_out
        self.state = WorkerState(
            config=config,
            workdir=config.get("workdir", "/tmp"),
            sweeper=Sweeper(bool(config.get("pid_namespace"))),
        )
        self.cleanup = WorkerReset(self.state)
        self.runs = StatelessRuns(self.state, self.cleanup)
        self.sessions = SessionTable(self.state)
        self.hello: dict = {
            "event": "hello",
            "pid": os.getpid(),
            "uid": os.getuid(),
            "python": sys.version,
        }

    def setup(self) -> None:
        load_libraries(self.state.config, self.hello)
        confine_supervisor(self.state, self.hello)
        enter_workdir(self.state, self.hello)
        self.cleanup.take_baselines(self.hello)
        settle_heap(self.hello)
        # A holder resumed while parked is stopped again as soon as the kernel says so
        # (its SIGCHLD), not only at its session's next request (issue #40, class 4).
        signal.signal(signal.SIGCHLD, lambda *_: self.state.family.check_parked())

    def serve(self) -> None:
        write_frame(self.proto_out, self.hello)
        if self.hello.get("fatal"):
            return  # refused to start: the host reads why in the hello
        handlers = {
            "seal": self.cleanup.seal,
            "ping": self.cleanup.ping,
            "probe": lambda req: probe(self.state, self.cleanup, req),
            "run": self.runs.run,
            "session_open": self.sessions.open,
            "session_fork": self.sessions.fork,
            "session_close": self.sessions.close,
            "cell": self.sessions.cell,
        }
        while True:
            req = read_frame(self.proto_in)
            if req is None or req.get("op") == "exit":
                self.state.sweeper.kill_all(timeout=2.0)
                return
            handler = handlers.get(req.get("op"))
            self.state.family.check_parked()
            if req.get("op") in SWEEPING_OPS:
                self.runs.discard_prepared()
            try:
                if req.get("op") in SEALED_OPS and self.state.exposure is None:
                    resp = {"status": "sandbox_error", "message": "the worker is not sealed"}
                    resp["recycle"] = True
                elif handler is None:
                    resp = {"status": "sandbox_error", "message": "unknown op"}
                else:
                    resp = handler(req)
            except Exception as exc:  # never die on a bad request: report and recycle
                where = traceback.extract_tb(exc.__traceback__)[-1]
                resp = {
                    "status": "sandbox_error",
                    "message": f"supervisor error: {type(exc).__name__}: {exc} (line {where.lineno}: {where.line})",
                    "recycle": True,
                }
            resp["id"] = req.get("id")
            write_frame(self.proto_out, resp)
            self.after_response(req.get("op"))

    def after_response(self, op: str | None) -> None:
        """Work kept off the request's latency: reap killed processes, fork the next child."""
        if self.cleanup.needs_cleanup:
            self.cleanup.finish_cleanup()
        self.cleanup.reap_pending()
        if op == "run":
            self.runs.prepare_next()


def main() -> None:
    # The protocol lives on high, close-on-exec descriptors; 0/1 become /dev/null so a stray
    # print in the supervisor can never corrupt a frame. stderr (2) stays for diagnostics.
    proto_in = dup_high(0)
    proto_out = dup_high(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    config = read_frame(proto_in)
    if config is None:
        sys.exit(2)
    set_name(SUPERVISOR_NAME)
    supervisor = Supervisor(proto_in, proto_out, config)
    supervisor.setup()
    supervisor.serve()
