"""Stateless runs: one fresh child per execution, forked ahead of time.

The next execution's child is forked while the host reads the previous answer
(``prepare_next``): it restricts itself (session, descriptors, no_new_privs, Landlock)
and waits for its request on a private pipe; the per-request rlimits come with the
request. A run that finished and closed its output is answered at once (the fast path)
and its processes are reaped and the dirs wiped after the answer (``WorkerReset``).
"""

from __future__ import annotations

import builtins
import contextlib
import os
import select
import signal
import time

from .files import fetch_files, paths_problem, put_files
from .frames import read_frame, write_frame
from .outcome import Capture, classify, reported_exit, result_dict, return_code
from .processes import LONG_RUN_SECONDS, yield_cpu
from .reset import WorkerReset
from .restrictions import (
    IDLE_NAME,
    SUPERVISOR_NAME,
    apply_limits,
    cpu_limits,
    restrict_static,
    set_name,
)
from .state import WorkerState
from .usercode import (
    INTERNAL_ERROR_EXIT,
    LANGUAGES,
    exec_bash,
    flush_std_streams,
    install_std_streams,
    report_internal_failure,
    reset_signals,
    run_user_code,
    text_fd,
)


class Prepared:
    """A forked child waiting for its request (see ``StatelessRuns.prefork``)."""

    def __init__(self, pid: int, ctrl: int, out_r: int, err_r: int) -> None:
        self.pid, self.ctrl, self.out_r, self.err_r = pid, ctrl, out_r, err_r

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(self.pid, 0)
        for fd in (self.ctrl, self.out_r, self.err_r):
            with contextlib.suppress(OSError):
                os.close(fd)


def wait_for_child(
    pid: int, capture: Capture, deadline: float, *, early: bool = False
) -> tuple[bool, bool, int | None]:
    """Pump output until the child exits (or says it is done), floods or runs out of time.

    Returns (exited, timed_out, reported exit code). With ``early``, a child that closed
    both outputs and named itself ``exit:<code>`` counts as done before its teardown.
    """
    pidfd = os.pidfd_open(pid)
    yield_at = time.monotonic() + LONG_RUN_SECONDS
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        for fd in capture.open:
            poller.register(fd, select.POLLIN)
        while True:
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                return False, True, None
            if yield_at and now >= yield_at:
                yield_cpu(pid)
                yield_at = 0.0
            wait = min(remaining, yield_at - now) if yield_at else remaining
            for fd, _ in poller.poll(max(1, int(wait * 1000))):
                if fd == pidfd:
                    return True, False, None
                capture.read(fd)
                if fd not in capture.open:
                    poller.unregister(fd)
                    if early and not capture.open:
                        reported = reported_exit(pid)
                        if reported is not None:
                            return False, False, reported
            if capture.over:
                return False, False, None
    finally:
        os.close(pidfd)


class StatelessRuns:
    """The ``run`` request and the pre-forked child that serves the next one."""

    def __init__(self, state: WorkerState, cleanup: WorkerReset) -> None:
        self.state = state
        self.cleanup = cleanup
        self.prepared: Prepared | None = None

    def prefork(self) -> Prepared:
        """Fork the next execution's child ahead of time (off the request's critical path)."""
        workdir, landlock = self.state.workdir, self.state.landlock
        ctrl_r, ctrl_w = os.pipe2(os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        set_name(IDLE_NAME)  # inherited from birth: the host tells this child from leftovers
        pid = os.fork()
        if pid == 0:  # child: never returns
            rc = INTERNAL_ERROR_EXIT
            try:
                os.setsid()
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                restrict_static(landlock)
                if ctrl_r != 3:  # dup3 refuses equal descriptors (a supervisor born without 0-2)
                    os.dup2(ctrl_r, 3, inheritable=False)
                os.closerange(4, 1 << 16)
                os.chdir(workdir)
                reset_signals()
                req = read_frame(3)
                os.close(3)
                if req is None:
                    os._exit(0)
                set_name(b"python3")
                limits = req.get("limits", {})
                bash = req.get("language") == "bash"
                # bash starts small: its address-space cap is the limit itself, not the
                # pre-imported interpreter's size plus the limit
                apply_limits(limits, cpu=cpu_limits(limits), vm_base=0 if bash else None)
                if req.get("stdin") is not None:
                    os.dup2(text_fd(str(req["stdin"])), 0)
                if bash:
                    exec_bash(str(req.get("code", "")))  # same restrictions; never returns
                install_std_streams()
                me = os.getpid()
                namespace = {"__name__": "__main__", "__builtins__": builtins}
                rc = run_user_code(
                    str(req.get("code", "")), namespace, "<cell>", bool(req.get("show_last", True))
                )
                if os.getpid() != me:  # a fork of the code fell through: leave quietly
                    os._exit(rc)
                flush_std_streams()
                # Done: put the exit code in the process name and close the output, so the
                # supervisor can answer without waiting for this process's teardown (~3 ms for
                # a numpy+sympy address space). No descriptor is involved; the code could do
                # the same, and would only end itself early.
                set_name(b"exit:%d" % (rc & 0xFF))
                os.close(1)
                os.close(2)
            except BaseException:
                report_internal_failure()
            finally:
                os._exit(rc)
        set_name(SUPERVISOR_NAME)
        for fd in (ctrl_r, out_w, err_w):
            os.close(fd)
        return Prepared(pid, ctrl_w, out_r, err_r)

    def discard_prepared(self) -> None:
        if self.prepared is not None:
            self.prepared.discard()
            self.prepared = None
            self.state.sweeper.reap()

    def prepare_next(self) -> None:
        if self.prepared is None and self.state.family.any() is None and not self.cleanup.dirty:
            try:
                self.prepared = self.prefork()
            except OSError:
                self.prepared = None

    def run(self, req: dict) -> dict:
        cleanup = self.cleanup
        if cleanup.needs_cleanup:
            cleanup.finish_cleanup()
        if cleanup.dirty:
            return {
                "status": "sandbox_error",
                "message": "the previous execution could not be cleaned up: "
                + (cleanup.reset_problem or "unknown reason"),
                "recycle": True,
                "not_run": True,
            }
        workdir = self.state.workdir
        limits = req.get("limits", {})
        timeout = float(limits.get("timeout", 10))
        cpu = cpu_limits(limits)
        language = req.get("language") or "python"
        problem = paths_problem(req.get("files"), req.get("fetch_files"))
        if language not in LANGUAGES:
            problem = f"unknown language {language!r} (supported: {', '.join(LANGUAGES)})"
        if not problem:
            problem = put_files(workdir, req.get("files"))
            cleanup.needs_cleanup = bool(req.get("files"))  # wiped even if nothing runs
        if problem:
            return {"status": "sandbox_error", "message": problem}
        max_file_bytes = int(limits.get("max_file_bytes") or 16 * 1024 * 1024)
        job = {
            "code": req.get("code", ""),
            "limits": limits,
            "stdin": req.get("stdin"),
            "show_last": bool(req.get("show_last", True)),
            "language": language,
        }
        prepared, self.prepared = self.prepared, None
        for _ in range(2):
            if prepared is None:
                prepared = self.prefork()
            start = time.monotonic()
            try:
                write_frame(prepared.ctrl, job)
                break
            except OSError:  # the prepared child is gone: fork a fresh one
                prepared.discard()
                self.state.sweeper.reap()
                prepared = None
        else:
            return {
                "status": "sandbox_error",
                "message": "could not start the execution",
                "recycle": True,
            }
        os.close(prepared.ctrl)
        pid, capture = (
            prepared.pid,
            Capture(prepared.out_r, prepared.err_r, int(limits.get("max_output_bytes", 65536))),
        )
        no_session = self.state.family.any() is None
        exited, timed_out, reported = wait_for_child(
            pid, capture, start + timeout, early=no_session
        )
        if reported is not None and no_session:
            # Fast path: the code finished and closed its output. Kill whatever is left (the
            # child included) now; reaping and wiping happen after the answer, before the
            # next request is read (``Supervisor.after_response``).
            duration = time.monotonic() - start
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)
            cleanup.needs_cleanup = True
            fetched, _ = fetch_files(workdir, req.get("fetch_files"), max_file_bytes)
            capture.drain(time.monotonic() + 1.0)
            capture.close()
            kind, message = classify(
                status=(reported & 0xFF) << 8,
                capture=capture,
                timed_out=False,
                timeout=timeout,
                cpu_seconds=cpu[0],
                cpu_used=0.0,
            )
            if cleanup.too_costly_to_reset() or cleanup.supervisor_changed():
                cleanup.dirty = True
            return result_dict(
                kind,
                message,
                capture,
                reported & 0xFF,
                duration,
                recycle=cleanup.dirty,
                files=fetched,
            )
        if not exited:
            os.kill(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
        duration = time.monotonic() - start
        fetched, _ = fetch_files(workdir, req.get("fetch_files"), max_file_bytes)
        clean = cleanup.reset()
        capture.drain(time.monotonic() + 1.0)
        capture.close()
        kind, message = classify(
            status=status,
            capture=capture,
            timed_out=timed_out,
            timeout=timeout,
            cpu_seconds=cpu[0],
            cpu_used=usage.ru_utime + usage.ru_stime,
        )
        return result_dict(
            kind,
            message,
            capture,
            return_code(status),
            duration,
            recycle=not clean,
            files=fetched,
        )
