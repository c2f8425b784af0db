"""The session's fork chain, inside the sandbox: the state holder and its cells.

Runs in the holder process (a fork of the supervisor that never ran user code, or the
process of the last cell that finished). Issue #11, class 4: no descriptor that drives
the session protocol may be reachable from a cell's code, so the channels are split:

- ``sock`` (holder <-> supervisor) is close-on-exec and closed in the cell before any
  user code runs; only the holder writes to it, and only *after* its cell finished;
- each cell gets its own report channel to the holder (a socketpair, close-on-exec,
  ``SO_PASSCRED`` on the holder's end): the holder believes a "done" only from the pid
  it forked (or the single-threaded successor that pid named and then exited for);
- a finished cell becomes holder only once single-threaded (a cell that left threads
  running forks a successor: ``fork`` copies only the calling thread, so the threads
  stay behind in a process that exits), with the interpreter's trace/profile hooks
  cleared, the collector off (no finalizer runs while idle) and every catchable signal
  ignored (a later cell signalling its holder runs none of an earlier cell's handlers);
- the holder hands ``sock`` to the new holder over the report channel (``SCM_RIGHTS``)
  and only then tells the supervisor, which adopts the new holder only when the cell's
  output pipes reached end-of-file (no writer of the cell is left).

An idle holder also serves ``fork`` (a new session of the same worker, see
``forking``): it forks itself, and the copy goes on serving cells on a channel of its own.

What stays possible, as in any notebook: a cell shapes what later cells of the *same*
session see (it can rebind ``print``, or rewrite its own interpreter with ctypes); the
supervisor trusts only what the kernel vouches for (sender pids, exits) and kills every
process but the holder after each cell, so nothing reaches beyond the session.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

from . import usercode
from .forking import enter_own_domain, fork_holder
from .usercode import (
    INTERNAL_ERROR_EXIT,
    flush_std_streams,
    install_std_streams,
    reset_signals,
    run_user_code,
)

CREDENTIALS_SIZE = 12
"""``struct ucred``: pid, uid, gid."""
CATCHABLE_SIGNALS = [
    sig
    for sig in signal.Signals
    if sig not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD)
    and not signal.SIGRTMIN <= sig <= signal.SIGRTMAX
]


def thread_count() -> int:
    """Kernel threads of this process (Python threads and native ones alike)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


CELL_SIGNAL_HANDLERS: dict[int, object] = {}
"""The dispositions a cell starts with, taken in the first holder before any cell ran."""


def quiet_holder_state() -> None:
    """Nothing of a cell's may run in an idle holder: no hooks, no finalizers, no handlers."""
    sys.settrace(None)
    sys.setprofile(None)
    gc.disable()
    for sig in CATCHABLE_SIGNALS:
        with contextlib.suppress(OSError, ValueError):
            if sig not in CELL_SIGNAL_HANDLERS:
                CELL_SIGNAL_HANDLERS[sig] = signal.getsignal(sig)
            signal.signal(sig, signal.SIG_IGN)


def reap_children_while_idle() -> None:
    """An idle holder keeps no zombie (issue #24, class 4): its children are reaped by the
    kernel as they die (``SIGCHLD`` ignored), and those already dead are reaped here.

    A finished cell becomes holder with whatever children its code forked and did not
    wait for (exited ones, and live ones the supervisor kills right after): unreaped, they
    would stay its zombies and count against the family's process limit (``RLIMIT_NPROC``
    and the pids cgroup are shared by every holder of the worker), so a sibling's next
    cell could not fork. ``SIGCHLD`` goes back to default while the holder runs a cell or
    a fork, whose exits it must wait for (``children_waited``).
    """
    with contextlib.suppress(OSError, ValueError):
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        except InterruptedError:
            continue
        if pid == 0:
            return


def children_waited() -> None:
    """Back to default ``SIGCHLD``: the holder waits for the cell or fork it starts."""
    with contextlib.suppress(OSError, ValueError):
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)


def cell_signal_state() -> None:
    """A cell gets the dispositions of a fresh execution back (the holder ignores all)."""
    for sig, handler in CELL_SIGNAL_HANDLERS.items():
        with contextlib.suppress(OSError, ValueError, TypeError):
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    reset_signals()


def receive_with_sender(sock: socket.socket, timeout: float | None = None) -> tuple[dict, int]:
    """One JSON message and the sender's pid as the kernel vouches for it.

    ``({"event": "eof"}, 0)`` when every other end is closed; ``({}, pid)`` for garbage.
    """
    if timeout is not None:
        ready, _, _ = select.select([sock], [], [], timeout)
        if not ready:
            return {}, 0
    for _ in range(2):
        try:
            data, ancdata, _flags, _addr = sock.recvmsg(
                65536, socket.CMSG_SPACE(CREDENTIALS_SIZE), socket.MSG_DONTWAIT
            )
            break
        except ConnectionResetError:
            # a peer died with messages unread: reported once, the queue is still intact
            continue
        except (BlockingIOError, InterruptedError):
            return {}, 0
    else:
        return {}, 0
    sender = 0
    for level, kind, payload in ancdata:
        if (
            level == socket.SOL_SOCKET
            and kind == socket.SCM_CREDENTIALS
            and len(payload) >= CREDENTIALS_SIZE
        ):
            sender = struct.unpack("=iII", payload[:CREDENTIALS_SIZE])[0]
    if not data:
        return {"event": "eof"}, sender
    try:
        msg = json.loads(data)
    except ValueError:
        return {}, sender
    return (msg if isinstance(msg, dict) else {}), sender


def accepts_done(sender: int, cell_pid: int, successor: int, cell_exited: bool) -> bool:
    """A "done" counts from the forked cell while it lives, or, once it exited, from the
    single-threaded successor it named (a helper the cell forked is neither)."""
    if sender <= 1:
        return False
    if not cell_exited:
        return sender == cell_pid
    return successor > 1 and sender == successor


def holder_loop(sock: socket.socket) -> None:
    """Serve cells; returns never (the process exits, or a cell's successor continues)."""
    namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
    quiet_holder_state()
    while True:
        reap_children_while_idle()
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 65536, 4)
        except (InterruptedError, ConnectionResetError):
            continue
        if not data:
            os._exit(0)  # the supervisor is gone
        children_waited()
        try:
            msg = json.loads(data)
        except ValueError:
            msg = {}
        if isinstance(msg, dict) and msg.get("op") == "fork" and len(fds) == 1:
            handed = fork_holder(sock, msg, fds[0])
            if handed is not None:
                sock = handed  # this process is the fork: it holds a copy of the state
            continue
        if isinstance(msg, dict) and msg.get("op") == "domain" and not fds:
            enter_own_domain(sock, msg)
            continue
        if not isinstance(msg, dict) or msg.get("op") != "cell" or len(fds) != 4:
            for fd in fds:
                os.close(fd)
            continue
        handed = _run_cell(sock, msg, fds, namespace)
        if handed is not None:
            sock = handed  # this process is the cell that finished: it now holds the state


def _run_cell(
    sock: socket.socket, msg: dict, fds: list[int], namespace: dict
) -> socket.socket | None:
    """Fork the cell, wait for it, report to the supervisor; the cell's side returns the
    handed-over supervisor socket (it is the new holder), the holder's side ``None``."""
    seq = msg.get("seq")
    with os.fdopen(fds.pop(), "rb") as f:
        code = f.read().decode("utf-8", errors="replace")
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    mine.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    pid = os.fork()
    if pid == 0:
        mine.close()
        sock.close()  # the supervisor's channel is never open while user code runs
        return _cell_child(theirs, msg, fds, code, namespace)
    theirs.close()
    for fd in fds:
        os.close(fd)
    report = _await_cell(mine, pid)
    if report.get("outcome") == "done":
        try:
            socket.send_fds(mine, [b"holder"], [sock.fileno()])
        except OSError:
            report = {"outcome": "died", "status": None, "cpu": 0.0}
    try:
        sock.send(json.dumps({"event": "finished", "seq": seq, **report}).encode())
    except OSError:
        os._exit(0)
    mine.close()
    if report.get("outcome") == "done":
        while True:  # handed over: the supervisor kills this process now
            time.sleep(3600)
    return None


def _await_cell(report: socket.socket, cell_pid: int) -> dict:
    """Until the cell says done (credentials checked) or dies: what to tell the supervisor."""
    watched = os.pidfd_open(cell_pid)
    successor, cell_exited, cpu = 0, False, 0.0
    early: dict[int, int] = {}
    """"done" not acceptable yet: the successor's, before the cell named it or exited."""
    listening = [report]
    try:
        while True:
            ready, _, _ = select.select([*listening, watched], [], [])
            if report in ready:
                msg, sender = receive_with_sender(report)
                event = msg.get("event")
                rc = msg.get("rc") if isinstance(msg.get("rc"), int) else 1
                if event == "successor" and sender == cell_pid and not cell_exited:
                    named = msg.get("pid")
                    successor = named if isinstance(named, int) and named > 1 else 0
                elif event == "done" and accepts_done(sender, cell_pid, successor, cell_exited):
                    return {"outcome": "done", "rc": rc, "holder": sender}
                elif event == "done" and sender > 1 and len(early) < 64:
                    # perhaps the successor, whose "done" can overtake the cell's naming it
                    early[sender] = rc
                elif event == "eof":
                    listening.remove(report)  # no "done" can come any more: wait for the exit
            if watched in ready:
                if cell_exited or not successor:
                    status, used = _reap(cell_pid) if not cell_exited else (None, 0.0)
                    return {"outcome": "died", "status": status, "cpu": cpu + used}
                _, cpu = _reap(cell_pid)
                cell_exited = True
                if successor in early:
                    return {"outcome": "done", "rc": early[successor], "holder": successor}
                os.close(watched)
                try:  # from now on the named successor is the cell
                    watched = os.pidfd_open(successor)
                except OSError:
                    watched = -1
                    return {"outcome": "died", "status": None, "cpu": cpu}
    finally:
        if watched >= 0:
            os.close(watched)


def _reap(pid: int) -> tuple[int | None, float]:
    while True:
        try:
            _, status, usage = os.wait4(pid, 0)
            return status, usage.ru_utime + usage.ru_stime
        except InterruptedError:
            continue
        except ChildProcessError:  # the successor: not our child, its exit is not ours
            return None, 0.0


def _cell_child(
    report: socket.socket, msg: dict, fds: list[int], code: str, namespace: dict
) -> socket.socket:
    """The forked cell: run the code; if it finished, become the next holder."""
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
        cell_signal_state()
        gc.enable()
        install_std_streams()
        me = os.getpid()
        rc = run_user_code(
            code, namespace, str(msg.get("filename", "<cell>")), bool(msg.get("show_last", True))
        )
        if os.getpid() != me:
            os._exit(rc)
        if usercode.LAST_UNCAUGHT is not None and issubclass(usercode.LAST_UNCAUGHT, MemoryError):
            # A cell that ran out of memory is discarded like a killed one: the earlier
            # state is kept (and this process is near its address-space cap).
            flush_std_streams()
            os._exit(rc)
        flush_std_streams()
        return _become_holder(report, rc)
    except BaseException:
        os._exit(rc)


def _become_holder(report: socket.socket, rc: int) -> socket.socket:
    """Detach from the cell's pipes, drop its threads, say done, receive the holder's socket."""
    null = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(null, target)
    os.close(null)
    quiet_holder_state()
    reap_children_while_idle()  # before "done": the supervisor kills the rest right after
    if thread_count() > 1:
        successor = os.fork()
        if successor:
            report.send(json.dumps({"event": "successor", "pid": successor}).encode())
            os._exit(0)  # the cell's threads end with this process
    with contextlib.suppress(OSError):
        # fails only if the holder already handed over (an early "done") and was killed
        report.send(json.dumps({"event": "done", "rc": rc}).encode())
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(report, 64, 1)
        except (InterruptedError, ConnectionResetError):
            continue  # a reset (the old holder killed, frames unread) is reported once
        if data == b"holder" and len(fds) == 1:
            report.close()
            handed = socket.socket(fileno=fds[0])
            handed.set_inheritable(False)
            return handed
        for fd in fds:
            os.close(fd)
        if not data:
            os._exit(0)  # the holder is gone: this state was not adopted
