"""The warm supervisor that runs *inside* a sandbox worker: its loop and stateless runs.

This package is shipped into the sandbox as source (see ``bundle.py``) and executed by
the sandboxed interpreter (Debian's ``/usr/bin/python3`` for the local backend, the
image's Python for Docker), which cannot import agentenvs. Only the standard library is
used.

Why it exists: starting an interpreter and importing numpy + sympy costs ~0.6 s; a
``fork()`` of an interpreter that already did costs ~3 ms. The supervisor pre-imports
(and warms up sympy's lazy imports and caches), then serves requests with one fresh
child per execution, forked ahead of time while the host reads the previous answer.
Each child drops what it may do (``restrictions``), runs the code with its output on
capped pipes (``usercode``, ``outcome``), and is killed together with everything it
started when it ends, times out or floods its output (``processes``); then the writable
directories are wiped (``wipe``).

Wire protocol, on the supervisor's stdin/stdout (frames: 4-byte big-endian length, then
UTF-8 JSON):

1. Optional bootstrap (see ``BOOTSTRAP`` in the host package): the interpreter is started
   with ``-c BOOTSTRAP`` and the first frame is the bundled source, raw bytes.
2. Config frame (host -> supervisor): ``python_path``, ``preload``, ``warmup``, ``workdir``,
   ``scratch_dirs``, ``seccomp_bpf`` (base64 of a classic-BPF program or null),
   ``seccomp_stages`` (``{"children": ..., "read_only": ...}``, base64 programs stacked
   later: by every child, by every holder of a family that forked),
   ``landlock`` (``{"read": [...], "write": [...], "write_files": [...]}`` or null),
   ``landlock_scope_signals``, ``subreaper``, ``pid_namespace``.
3. ``hello`` event (supervisor -> host), then one response per request:
   ``probe``, ``run``, ``session_open``, ``session_fork``, ``session_close``, ``cell``,
   ``ping``, ``exit``.

Sessions (``session_open``, ``cell``) are in ``sessions``; ``session_fork`` forks a
session's state holder into a new session of the same worker (``forking``).
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import gc
import json
import os
import select
import signal
import sys
import time
import traceback

from .files import fetch_files, paths_problem, put_files
from .forking import read_only_spec
from .frames import dup_high, read_frame, write_frame
from .leftovers import POSIX_MQUEUE_DIR, remove_ipc_objects
from .outcome import Capture, classify, reported_exit, result_dict, return_code
from .probe import probe_report
from .processes import LONG_RUN_SECONDS, Sweeper, attributes_changed, own_attributes, yield_cpu
from .restrictions import (
    CHILD_SECCOMP,
    IDLE_NAME,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    READ_ONLY_SECCOMP,
    SUPERVISOR_NAME,
    Landlock,
    apply_limits,
    apply_seccomp,
    cpu_limits,
    prctl,
    restrict_process,
    restrict_static,
    set_name,
    vm_bytes,
)
from .session_table import SessionTable
from .sessions import Holder
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
from .wipe import ScratchDir


class Prepared:
    """A forked child waiting for its request (see ``Supervisor._prefork``)."""

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


class Supervisor:
    def __init__(self, proto_in: int, proto_out: int, config: dict) -> None:
        self.proto_in = proto_in
        self.proto_out = proto_out
        self.config = config
        self.workdir = config.get("workdir", "/tmp")
        self.scratch = [self.workdir, *config.get("scratch_dirs", [])]
        self.scratch_dirs: list[ScratchDir] = []
        """The writable directories with their clean baselines (measured in ``setup``)."""
        self.reset_problem = ""
        """Why the last reset could not prove the worker clean (empty when it could)."""
        self.attributes: dict = {}
        """The supervisor's own priority, policy, affinity and rlimits when it started."""
        self.sweeper = Sweeper(bool(config.get("pid_namespace")))
        self.landlock: Landlock | None = None
        self.sessions = SessionTable(self)
        self.read_only_landlock: Landlock | None = None
        """The Landlock of holders once a session forked (``forking``): no writes at all."""
        self.prepared: Prepared | None = None
        self.pending_reap: list[int] = []
        self.needs_cleanup = False
        """The last run was answered before its processes were reaped and dirs wiped."""
        self.dirty = False
        """Cleanup failed: this worker must not run anything else (the host recycles it)."""
        self.hello: dict = {
            "event": "hello",
            "pid": os.getpid(),
            "uid": os.getuid(),
            "python": sys.version,
        }

    # -- setup ---------------------------------------------------------------------
    def setup(self) -> None:
        for entry in self.config.get("python_path", []):
            path = entry.format(major=sys.version_info[0], minor=sys.version_info[1])
            if path not in sys.path:
                sys.path.append(path)
        preloaded, errors = [], {}
        for name in self.config.get("preload", []):
            try:
                __import__(name)
                preloaded.append(name)
            except BaseException as exc:  # a broken optional package must not stop the worker
                errors[name] = f"{type(exc).__name__}: {exc}"
        self.hello.update(preloaded=preloaded, preload_errors=errors)
        warmup = self.config.get("warmup")
        if warmup:
            # Trusted code from the host, run once here so that every forked child starts
            # with the libraries' lazy imports and caches already filled.
            started = time.monotonic()
            try:
                exec(compile(warmup, "<warmup>", "exec"), {"__name__": "__warmup__"})
                self.hello["warmup_seconds"] = round(time.monotonic() - started, 3)
            except BaseException as exc:
                self.hello["warmup_error"] = f"{type(exc).__name__}: {exc}"
        prctl(PR_SET_DUMPABLE, 0)  # /proc/<supervisor>/{mem,environ} unreadable by the code
        if self.config.get("subreaper", True):
            prctl(PR_SET_CHILD_SUBREAPER, 1)
        spec = self.config.get("landlock")
        if spec is not None:
            scope = bool(self.config.get("landlock_scope_signals", True))
            self.landlock = Landlock(spec, scope_signals=scope)
            self.read_only_landlock = Landlock(read_only_spec(spec), scope_signals=scope)
            self.hello.update(landlock_abi=self.landlock.abi, landlock_error=self.landlock.error)
        else:
            self.hello.update(landlock_abi=None, landlock_error="disabled by the host")
        bpf = self.config.get("seccomp_bpf")
        if bpf:
            error = apply_seccomp(base64.b64decode(bpf))
            self.hello.update(seccomp=error is None, seccomp_error=error)
        else:
            self.hello.update(seccomp=False, seccomp_error="no filter given by the host")
        stages = self.config.get("seccomp_stages") or {}
        if self.hello["seccomp"] and stages.get("children"):
            # loaded by every child (the supervisor itself renices long runs)
            CHILD_SECCOMP[:] = [base64.b64decode(stages["children"])]
        if self.hello["seccomp"] and stages.get("read_only"):
            # loaded by every holder of a family that forked (``forking``)
            READ_ONLY_SECCOMP[:] = [base64.b64decode(stages["read_only"])]
        self.hello.update(
            child_seccomp=bool(CHILD_SECCOMP), read_only_seccomp=bool(READ_ONLY_SECCOMP)
        )
        try:
            os.chdir(self.workdir)
        except OSError as exc:
            self.hello["workdir_error"] = str(exc)
        self.measure_scratch()
        self.attributes = own_attributes()
        gc.collect()
        gc.freeze()  # keep the pre-imported heap out of the collector: fewer copy-on-write faults
        self.hello["vm_bytes"] = vm_bytes()

    def measure_scratch(self) -> None:
        """Baselines of every writable directory, taken while they are still clean."""
        paths = list(self.scratch)
        if os.path.isdir(POSIX_MQUEUE_DIR) and os.access(POSIX_MQUEUE_DIR, os.W_OK):
            paths.append(POSIX_MQUEUE_DIR)
        for path in paths:
            scratch = ScratchDir.measure(path)
            if scratch is None:
                self.hello.setdefault("scratch_errors", []).append(path)
            else:
                self.scratch_dirs.append(scratch)

    # -- loop ----------------------------------------------------------------------
    def serve(self) -> None:
        write_frame(self.proto_out, self.hello)
        handlers = {
            "ping": self.ping,
            "probe": self.probe,
            "run": self.run,
            "session_open": self.sessions.open,
            "session_fork": self.sessions.fork,
            "session_close": self.sessions.close,
            "cell": self.sessions.cell,
        }
        while True:
            req = read_frame(self.proto_in)
            if req is None or req.get("op") == "exit":
                self.sweeper.kill_all(timeout=2.0)
                return
            handler = handlers.get(req.get("op"))
            if req.get("op") in ("probe", "session_open"):
                self.discard_prepared()  # they sweep every process but the supervisor
            try:
                resp = (
                    handler(req)
                    if handler
                    else {"status": "sandbox_error", "message": "unknown op"}
                )
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

    # -- stateless runs -------------------------------------------------------------
    def _spawn(self, body, limits: dict, stdin: str | None, cpu: tuple[int, int] | None):
        """Fork a child restricted like an execution that runs ``body`` (used by the probe)."""
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        in_fd = text_fd(stdin)
        pid = os.fork()
        if pid == 0:  # child: never returns
            rc = INTERNAL_ERROR_EXIT
            try:
                os.setsid()
                os.dup2(in_fd, 0)
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                state = restrict_process(limits, self.landlock, cpu=cpu)
                os.closerange(3, 1 << 16)
                os.chdir(self.workdir)
                reset_signals()
                install_std_streams()
                rc = body(state)
                flush_std_streams()
            except BaseException:
                report_internal_failure()
            finally:
                os._exit(rc)
        for fd in (out_w, err_w, in_fd):
            os.close(fd)
        return pid, Capture(out_r, err_r, int(limits.get("max_output_bytes", 65536)))

    def _wait(
        self, pid: int, capture: Capture, deadline: float, *, early: bool = False
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

    def _prefork(self) -> Prepared:
        """Fork the next execution's child ahead of time (off the request's critical path).

        The child restricts itself (session, descriptors, no_new_privs, Landlock) and waits
        for its request on a private pipe; the per-request rlimits come with the request.
        """
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
                restrict_static(self.landlock)
                if ctrl_r != 3:  # dup3 refuses equal descriptors (a supervisor born without 0-2)
                    os.dup2(ctrl_r, 3, inheritable=False)
                os.closerange(4, 1 << 16)
                os.chdir(self.workdir)
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
            self.sweeper.reap()

    def finish_cleanup(self) -> None:
        """Reap what the fast path killed and reset the worker, before anything else runs."""
        self.needs_cleanup = False
        if self.dirty:  # already condemned (the host recycles it): only stop what runs
            self._cleanup()
            return
        self.dirty = not self.reset()

    def reset(self) -> bool:
        """Remove everything an execution could leave for the next one; True once proven.

        The one place that decides whether this worker may run again (issue classes 1-3):
        no process of the execution left (``processes``), every writable directory empty
        and back at its baseline (``wipe``), no System V IPC object in the namespace
        (``leftovers``), and the supervisor's own priority, scheduling policy, affinity
        and rlimits as they were at start-up (``processes.own_attributes``, issue #24).
        Anything unproven makes the host recycle the worker instead.
        """
        self.reset_problem = ""
        if not self._cleanup():
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

    def after_response(self, op: str | None) -> None:
        """Work kept off the request's latency: reap killed processes, fork the next child."""
        if self.needs_cleanup:
            self.finish_cleanup()
        while self.pending_reap:
            pid = self.pending_reap.pop()
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:  # not our child (cannot happen in a pid namespace)
                deadline = time.monotonic() + 2.0
                while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                    time.sleep(0.001)
            except OSError:
                pass
        if op == "run":
            self.prepare_next()

    def prepare_next(self) -> None:
        if self.prepared is None and self.session is None and not self.dirty:
            try:
                self.prepared = self._prefork()
            except OSError:
                self.prepared = None

    def run(self, req: dict) -> dict:
        if self.needs_cleanup:
            self.finish_cleanup()
        if self.dirty:
            return {
                "status": "sandbox_error",
                "message": "the previous execution could not be cleaned up: "
                + (self.reset_problem or "unknown reason"),
                "recycle": True,
                "not_run": True,
            }
        limits = req.get("limits", {})
        timeout = float(limits.get("timeout", 10))
        cpu = cpu_limits(limits)
        language = req.get("language") or "python"
        problem = paths_problem(req.get("files"), req.get("fetch_files"))
        if language not in LANGUAGES:
            problem = f"unknown language {language!r} (supported: {', '.join(LANGUAGES)})"
        if not problem:
            problem = put_files(self.workdir, req.get("files"))
            self.needs_cleanup = bool(req.get("files"))  # wiped even if nothing runs
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
                prepared = self._prefork()
            start = time.monotonic()
            try:
                write_frame(prepared.ctrl, job)
                break
            except OSError:  # the prepared child is gone: fork a fresh one
                prepared.discard()
                self.sweeper.reap()
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
        exited, timed_out, reported = self._wait(
            pid, capture, start + timeout, early=self.session is None
        )
        if reported is not None and self.session is None:
            # Fast path: the code finished and closed its output. Kill whatever is left (the
            # child included) now; reaping and wiping happen after the answer, before the
            # next request is read (``after_response``).
            duration = time.monotonic() - start
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)
            self.needs_cleanup = True
            fetched, _ = fetch_files(self.workdir, req.get("fetch_files"), max_file_bytes)
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
            if self.too_costly_to_reset() or self.supervisor_changed():
                self.dirty = True
            return result_dict(
                kind,
                message,
                capture,
                reported & 0xFF,
                duration,
                recycle=self.dirty,
                files=fetched,
            )
        if not exited:
            os.kill(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
        duration = time.monotonic() - start
        fetched, _ = fetch_files(self.workdir, req.get("fetch_files"), max_file_bytes)
        clean = self.reset()
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

    def _cleanup(self) -> bool:
        holders = self.holder_pids()
        if holders:
            return self.sweeper.kill_except(holders)
        return self.sweeper.kill_all()

    # -- probe -----------------------------------------------------------------------
    def probe(self, req: dict) -> dict:
        """Fork a child restricted exactly like an execution and report what it can do."""
        limits = req.get("limits", {})
        workdir = self.workdir

        def body(state: dict) -> int:
            sys.stdout.write(json.dumps(probe_report(state, workdir)))
            return 0

        start = time.monotonic()
        pid, capture = self._spawn(body, limits, None, cpu_limits(limits))
        exited, _, _ = self._wait(pid, capture, start + 30)
        if not exited:
            os.kill(pid, signal.SIGKILL)
        os.wait4(pid, 0)
        capture.drain(time.monotonic() + 1.0)
        capture.close()
        self.dirty = not self.reset()
        try:
            report = json.loads(capture.text("stdout"))
        except ValueError:
            return {
                "ok": False,
                "message": "probe failed",
                "stderr": capture.text("stderr")[-4000:],
            }
        return {"ok": True, "report": report}

    # -- sessions ----------------------------------------------------------------------
    @property
    def session(self) -> Holder | None:
        """Any live session (stateless runs take the fast path only when there is none)."""
        return self.sessions.any()

    def holder_pids(self) -> set[int]:
        """The processes the sweeper must spare: every live session's state holder."""
        return self.sessions.holder_pids()

    def holder_landlock(self) -> Landlock | None:
        """What a new holder is confined by: read-only once any session of this worker forked."""
        return self.read_only_landlock if self.sessions.forked else self.landlock


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
