"""Notebook sessions: a fork chain whose head holds the namespace between cells.

A holder process owns the notebook namespace; for a cell it forks a child that runs the
code in a copy-on-write copy of that namespace. If the cell finishes (even with an
exception, as in Jupyter), the child becomes the new holder and the old holder is killed;
if the cell times out, crashes, runs out of memory or calls ``os._exit``, the child is
killed and the old holder's variables are untouched. Nothing is pickled, so generators,
open files and lambdas survive too. If the holder itself is lost (a cell killed it and
then died), the supervisor starts a fresh one and says ``state_lost``: the host replays
earlier cells.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import resource
import select
import signal
import socket
import struct
import time
from typing import TYPE_CHECKING

from . import usercode
from .outcome import Capture, classify, result_dict, return_code
from .restrictions import cpu_limits, restrict_process
from .usercode import (
    INTERNAL_ERROR_EXIT,
    flush_std_streams,
    install_std_streams,
    reset_signals,
    run_user_code,
    text_fd,
)

if TYPE_CHECKING:
    from .server import Supervisor


class Holder:
    """The supervisor's side of one session's fork chain (see the module docstring)."""

    def __init__(self, sup: Supervisor, limits: dict) -> None:
        self.sup = sup
        self.limits = limits
        cpu_soft, _ = cpu_limits(limits)
        # Per-cell CPU is a soft limit set by each cell; the hard one, fixed here, is a
        # generous cap for a whole chain (the wall-clock timeout is the real bound).
        self.cpu_hard = cpu_soft * 10 + 1
        self.seq = 0
        self.sock: socket.socket | None = None
        self.pid = 0
        self.pidfd = -1
        self._start()

    def _start(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            rc = INTERNAL_ERROR_EXIT
            try:
                parent.close()
                os.setsid()
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                restrict_process(self.limits, self.sup.landlock, cpu=(self.cpu_hard, self.cpu_hard))
                keep = child.fileno()
                os.closerange(3, keep)
                os.closerange(keep + 1, 1 << 16)
                os.chdir(self.sup.workdir)
                reset_signals()
                holder_loop(child)
            finally:
                os._exit(rc)
        child.close()
        parent.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock = parent
        self._track(pid)

    def _track(self, pid: int) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
        self.pid = pid
        try:
            self.pidfd = os.pidfd_open(pid)
        except OSError:
            self.pidfd = -1

    def alive(self) -> bool:
        if self.pidfd < 0:
            return False
        ready, _, _ = select.select([self.pidfd], [], [], 0)
        return not ready

    def close(self) -> None:
        self.sup.sweeper.kill_all(timeout=2.0)
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1

    def _recv(self) -> tuple[dict | None, int]:
        """One message from the chain, with the sender's pid as the kernel vouches for it."""
        assert self.sock is not None
        try:
            data, ancdata, _flags, _addr = self.sock.recvmsg(
                65536, socket.CMSG_SPACE(12), socket.MSG_DONTWAIT
            )
        except (BlockingIOError, InterruptedError):
            return None, 0
        sender = 0
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= 12:
                sender = struct.unpack("=iII", payload[:12])[0]
        if not data:
            return {"event": "eof"}, sender
        try:
            msg = json.loads(data)
        except ValueError:
            return None, sender
        return (msg if isinstance(msg, dict) else None), sender

    def _flush_stale(self) -> None:
        while True:
            msg, _ = self._recv()
            if msg is None or msg.get("event") == "eof":
                return

    def _restart(self) -> None:
        self.close()
        self._start()

    def run_cell(self, req: dict) -> dict:
        limits = self.limits
        timeout = float(req.get("timeout") or limits.get("timeout", 10))
        cpu_soft = min(
            cpu_limits({**limits, "timeout": timeout, "cpu_seconds": req.get("cpu_seconds")})[0],
            self.cpu_hard - 1,
        )
        state_lost = False
        if not self.alive():
            self._restart()
            return {
                "status": "sandbox_error",
                "message": "the session's state holder was gone; a fresh one was started",
                "state_lost": True,
                "not_run": True,
            }
        self._flush_stale()
        self.seq += 1
        seq = self.seq
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        in_fd = text_fd(req.get("stdin"))
        code_fd = text_fd(str(req.get("code", "")), "code")
        capture = Capture(out_r, err_r, int(limits.get("max_output_bytes", 65536)))
        message = {
            "op": "cell",
            "seq": seq,
            "show_last": bool(req.get("show_last", True)),
            "cpu": cpu_soft,
            "filename": f"<cell-{seq}>",
        }
        start = time.monotonic()
        try:
            socket.send_fds(
                self.sock, [json.dumps(message).encode()], [in_fd, out_w, err_w, code_fd]
            )
        except OSError:
            for fd in (in_fd, out_w, err_w, code_fd):
                os.close(fd)
            capture.close()
            self._restart()
            return {
                "status": "sandbox_error",
                "message": "the session's state holder was gone; a fresh one was started",
                "state_lost": True,
                "not_run": True,
            }
        for fd in (in_fd, out_w, err_w, code_fd):
            os.close(fd)

        deadline = start + timeout
        cell_pid, cell_pidfd = 0, -1
        adopted_pid, rc_reported, status = 0, None, None
        cpu_used = 0.0
        timed_out = cell_exited = False
        early_done: dict[int, int] = {}
        """"done" from senders not yet known to be the cell (the holder says which is)."""
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        if self.pidfd >= 0:
            poller.register(self.pidfd, select.POLLIN)
        for fd in capture.open:
            poller.register(fd, select.POLLIN)
        try:
            while not (adopted_pid or cell_exited or capture.over):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                for fd, _ in poller.poll(max(1, int(remaining * 1000))):
                    if fd == self.sock.fileno():
                        msg, sender = self._recv()
                        if msg is None or msg.get("seq") != seq:
                            if msg is not None and msg.get("event") == "eof":
                                poller.unregister(fd)  # every end of the chain is closed: all dead
                                cell_exited = True
                            continue
                        event = msg.get("event")
                        if event == "started" and sender == self.pid and cell_pidfd < 0:
                            pid = msg.get("pid")
                            if isinstance(pid, int) and pid > 1:
                                cell_pid = pid
                                if pid in early_done:  # its "done" overtook "started"
                                    adopted_pid, rc_reported = pid, early_done[pid]
                                try:
                                    cell_pidfd = os.pidfd_open(pid)
                                    poller.register(cell_pidfd, select.POLLIN)
                                except OSError:
                                    cell_exited = True
                        elif event == "done" and sender not in (0, 1, os.getpid(), self.pid):
                            rc = msg.get("rc") if isinstance(msg.get("rc"), int) else 1
                            if not cell_pid:
                                early_done[sender] = rc
                            elif is_the_cell(sender, cell_pid):
                                adopted_pid, rc_reported = sender, rc
                        elif event == "died" and sender == self.pid:
                            status, cpu_used = _died_report(msg)
                            cell_exited = True
                    elif fd == self.pidfd:
                        poller.unregister(fd)
                        if not cell_pid:
                            cell_exited = True  # it died before forking the cell
                    elif fd == cell_pidfd:
                        cell_exited = True
                    else:
                        capture.read(fd)
                        if fd not in capture.open:
                            poller.unregister(fd)
        finally:
            if cell_pidfd >= 0:
                os.close(cell_pidfd)
        duration = time.monotonic() - start

        sweeper = self.sup.sweeper
        spare = set()
        if adopted_pid:
            previous = self.pid
            self._track(adopted_pid)
            with contextlib.suppress(OSError):
                os.kill(previous, signal.SIGKILL)
            # Killed now (it cannot run anything any more); its teardown and reaping happen
            # after the answer is sent, off the cell's latency.
            self.sup.pending_reap.append(previous)
            spare.add(previous)
        sweeper.reaped.clear()
        clean = sweeper.kill_except(({self.pid} if self.alive() else set()) | spare)
        if status is None and cell_pid in sweeper.reaped:  # an orphaned cell, re-parented to us
            status = sweeper.reaped[cell_pid]
        if not adopted_pid and status is None and self.alive():
            status, cpu_used = self._await_died(seq)
        capture.drain(time.monotonic() + 1.0)
        capture.close()

        status_word = (
            ((rc_reported if rc_reported is not None else 1) & 0xFF) << 8 if adopted_pid else status
        )
        kind, text = classify(
            status=status_word,
            capture=capture,
            timed_out=timed_out,
            timeout=timeout,
            cpu_seconds=float(cpu_soft),
            cpu_used=cpu_used,
        )
        if not adopted_pid and kind == "ok":
            text = (
                "the cell's process exited before the end of the cell; its variables were discarded"
            )
        if not clean or (not adopted_pid and not self.alive()):
            self._restart()
            state_lost = True
        notes = [text] if text else []
        if not adopted_pid and kind != "ok" and not state_lost:
            notes.append("variables from earlier cells are kept")
        if state_lost:
            notes.append("the session's state holder was lost and has been restarted empty")
        return result_dict(
            kind,
            "; ".join(notes),
            capture,
            return_code(status_word),
            duration,
            adopted=bool(adopted_pid),
            state_lost=state_lost,
        )

    def _await_died(self, seq: int) -> tuple[int | None, float]:
        """After killing a cell, the holder reports its exit; wait briefly for that."""
        assert self.sock is not None
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.sock], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            msg, sender = self._recv()
            if msg is None:
                continue
            if msg.get("event") == "eof":
                break
            if msg.get("event") == "died" and msg.get("seq") == seq and sender == self.pid:
                return _died_report(msg)
        return None, 0.0


def _died_report(msg: dict) -> tuple[int | None, float]:
    status, cpu = msg.get("status"), msg.get("cpu")
    return (status if isinstance(status, int) else None), (
        float(cpu) if isinstance(cpu, (int, float)) else 0.0
    )


def holder_loop(sock: socket.socket) -> None:
    """Runs in a session's state-holding process; a successful cell's child continues it."""
    namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
    send = sock.send  # bound before any user code runs
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 65536, 4)
        except InterruptedError:
            continue
        if not data:
            os._exit(0)  # the supervisor is gone
        try:
            msg = json.loads(data)
        except ValueError:
            msg = {}
        if msg.get("op") != "cell" or len(fds) != 4:
            for fd in fds:
                os.close(fd)
            continue
        seq = msg.get("seq")
        code_fd = fds.pop()
        with os.fdopen(code_fd, "rb") as f:
            code = f.read().decode("utf-8", errors="replace")
        pid = os.fork()
        if pid == 0:
            rc = INTERNAL_ERROR_EXIT
            try:
                os.setsid()
                for target, fd in zip((0, 1, 2), fds, strict=False):
                    os.dup2(fd, target)
                    os.close(fd)
                _, hard = resource.getrlimit(resource.RLIMIT_CPU)
                soft = int(msg.get("cpu", 10))
                if hard != resource.RLIM_INFINITY:
                    soft = min(soft, hard)
                resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
                install_std_streams()
                me = os.getpid()
                rc = run_user_code(
                    code,
                    namespace,
                    str(msg.get("filename", "<cell>")),
                    bool(msg.get("show_last", True)),
                )
                if os.getpid() != me:
                    os._exit(rc)
                if usercode.LAST_UNCAUGHT is not None and issubclass(
                    usercode.LAST_UNCAUGHT, MemoryError
                ):
                    # A cell that ran out of memory is discarded like a killed one: the
                    # earlier state is kept (and this process is near its address-space cap).
                    flush_std_streams()
                    os._exit(rc)
                flush_std_streams()
                # This process now holds the newest state: detach from the cell's pipes.
                null = os.open(os.devnull, os.O_RDWR)
                for target in (0, 1, 2):
                    os.dup2(null, target)
                os.close(null)
                send(json.dumps({"event": "done", "seq": seq, "rc": rc}).encode())
            except BaseException:
                os._exit(rc)
            continue
        for fd in fds:
            os.close(fd)
        try:
            send(json.dumps({"event": "started", "seq": seq, "pid": pid}).encode())
        except OSError:
            os._exit(0)
        status, cpu = None, 0.0
        while True:
            try:
                _, status, usage = os.wait4(pid, 0)
                cpu = usage.ru_utime + usage.ru_stime
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                break
        try:
            send(json.dumps({"event": "died", "seq": seq, "status": status, "cpu": cpu}).encode())
        except OSError:
            os._exit(0)


def is_the_cell(sender: int, cell_pid: int) -> bool:
    """Issue class 4: only the process the holder forked for this cell may become holder.

    The holder (trusted: it runs no code of this cell) announces the cell's pid; the
    kernel vouches for every sender's pid (``SCM_CREDENTIALS``). A helper the cell forked,
    a stale process of an earlier cell or anything else that got hold of the socket and
    says "done" is ignored, so it can never be adopted as the state holder.
    """
    return sender == cell_pid
