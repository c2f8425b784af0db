"""Notebook sessions: a fork chain whose head holds the namespace between cells.

A holder process owns the notebook namespace; for a cell it forks a child that runs the
code in a copy-on-write copy of that namespace. If the cell finishes (even with an
exception, as in Jupyter), the child becomes the new holder and the old holder is killed;
if the cell times out, crashes, runs out of memory or calls ``os._exit``, the child is
killed and the old holder's variables are untouched. Nothing is pickled, so generators,
open files and lambdas survive too. If the holder itself is lost (a cell killed it and
then died), the supervisor starts a fresh one and says ``state_lost``: the host replays
earlier cells.

The holder's and the cell's side of the chain are in ``chain`` (issue #11, class 4: no
protocol descriptor reachable from a cell's code); this module is the supervisor's side,
which believes a message only from the current holder's pid (``SCM_CREDENTIALS``) and
adopts the holder it names only once the cell's output pipes reached end-of-file.

A worker can hold several sessions (``session_table``: the opened one and its forks);
each has a ``Holder`` here, and every sweep spares all of their holders. ``Holder.fork``
is the supervisor's side of forking one (``forking`` is the holder's).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import time
from dataclasses import dataclass

from .chain import holder_loop, receive_with_sender
from .forking import METADATA_DROPPED
from .leftovers import remove_ipc_objects
from .outcome import Capture, classify, result_dict, return_code
from .processes import (
    STOPPED_OR_GONE,
    await_no_zombies,
    continue_if_stopped,
    continued_since_stop,
    family_filters_problem,
    process_state,
)
from .restrictions import (
    RestrictionFailed,
    cpu_limits,
    drop_metadata_changes,
    restrict_process,
)
from .state import WorkerState
from .usercode import INTERNAL_ERROR_EXIT, reset_signals, text_fd

STOPPED_CHECK_SECONDS = 0.1
FORKED_IPC_NOTE = (
    "a System V shared memory segment was still attached when the cell ended; a forked "
    "session cannot keep one (its forks share the worker's IPC namespace), so the cell's "
    "variables were discarded"
)
ZOMBIES_NOTE = (
    "the cell's process kept children it did not wait for as zombies; a holder cannot "
    "keep them (they count against the session's process limit), so the cell's variables "
    "were discarded"
)
FORK_TIMEOUT_SECONDS = 10.0
"""A fork is an ``os.fork`` and a few reopened files: milliseconds; this bounds a stuck one."""
"""How often an idle wait looks whether the holder was stopped by its cell."""


class Holder:
    """The supervisor's side of one session's fork chain (see the module docstring)."""

    def __init__(
        self, state: WorkerState, limits: dict, *, adopt: tuple[socket.socket, int] | None = None
    ) -> None:
        self.state = state
        self.limits = limits
        cpu_soft, _ = cpu_limits(limits)
        # Per-cell CPU is a soft limit set by each cell; the hard one, fixed here, is a
        # generous cap for a whole chain (the wall-clock timeout is the real bound).
        self.cpu_hard = cpu_soft * 10 + 1
        self.seq = 0
        self.sock: socket.socket | None = None
        self.pid = 0
        self.pidfd = -1
        self.parked = False
        """Stopped by ``park`` until its session's next request."""
        self.tainted = False
        """Found running while parked (resumed by a signal): its state is not trusted."""
        self.nested: list[Holder] = []
        """Holders whose Landlock domain is nested in this one's (its forks, and theirs,
        made since it last entered a domain of its own): it runs no cell while one lives."""
        self.lost_note = ""
        """Why this holder was killed by the supervisor (said when its session finds it gone)."""
        if adopt is None:
            self._start()
        else:  # a fork of another session's holder (``fork``), already running
            self.sock = adopt[0]
            self._track(adopt[1])

    def fork(self) -> Holder | str:
        """A new holder forked from this one's idle state, or why it could not be made.

        The holder side is ``forking.fork_holder``; here the supervisor believes the
        fork's existence only from the kernel: a ``ready`` on the fork's own channel,
        whose sender pid is vouched for, after the parent reported success. The parent
        is parked again on every way out (issue #40, class 4).
        """
        if not self.alive() or self.sock is None:
            return "the session's state holder is gone"
        if self.tainted:
            return TAINTED_NOTE
        self.resume()
        try:
            return self._fork()
        finally:
            if self.alive():
                self.park()

    def _fork(self) -> Holder | str:
        assert self.sock is not None
        self._flush_stale()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        message = {"op": "fork", "landlock": self.state.config.get("landlock")}
        try:
            socket.send_fds(self.sock, [json.dumps(message).encode()], [theirs.fileno()])
        except OSError:
            ours.close()
            return "the session's state holder did not take the fork request"
        finally:
            theirs.close()
        parent_said, fork_pid = self._await_fork(ours, time.monotonic() + FORK_TIMEOUT_SECONDS)
        holders = self.state.family.holder_pids()
        made = parent_said.get("ok") and fork_pid > 1 and fork_pid not in holders
        problem = family_filters_problem({self.pid, fork_pid}) if made else ""
        if made and not problem:
            fork = Holder(self.state, self.limits, adopt=(ours, fork_pid))
            fork.park()
            for holder in [self, *self.state.family.holders.values()]:
                if holder is self or self in holder.nested:  # the fork is in their domain
                    holder.nested = [h for h in holder.nested if h.alive()] + [fork]
            # anything either started while they ran: only holders live between requests
            self.state.sweeper.kill_except(holders | {fork_pid})
            return fork
        ours.close()
        if fork_pid > 1 and fork_pid not in holders:
            with contextlib.suppress(OSError):
                os.kill(fork_pid, signal.SIGKILL)
        self.state.sweeper.kill_except(holders)
        return problem or str(parent_said.get("message") or "the fork did not start in time")

    def _await_fork(self, channel: socket.socket, deadline: float) -> tuple[dict, int]:
        """The parent's ``forked`` report and the pid that said ``ready`` on ``channel``."""
        assert self.sock is not None
        parent_said: dict = {}
        fork_pid = 0
        waiting = [self.sock, channel]
        while waiting and time.monotonic() < deadline:
            ready, _, _ = select.select(waiting, [], [], max(0.0, deadline - time.monotonic()))
            if self.sock in ready:
                msg = self._recv()
                if msg is not None and msg.get("event") == "eof":
                    return {"message": "the session's state holder died during the fork"}, 0
                if msg is not None and msg.get("event") == "forked":
                    parent_said = msg
                    waiting.remove(self.sock)
                    if not msg.get("ok"):
                        return parent_said, fork_pid
            if channel in ready:
                msg, sender = receive_with_sender(channel)
                if msg.get("event") == "eof":
                    waiting.remove(channel)
                elif msg.get("event") == "ready" and sender > 1:
                    fork_pid = sender
                    waiting.remove(channel)
        return parent_said, fork_pid

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
                restrict_process(
                    self.limits, self.state.holder_landlock(), cpu=(self.cpu_hard, self.cpu_hard)
                )
                if self.state.family.forked:  # read-only like its family (``forking``)
                    problem = drop_metadata_changes()
                    if problem is not None:
                        raise RestrictionFailed(problem)
                    METADATA_DROPPED[0] = True
                keep = child.fileno()
                os.closerange(3, keep)
                os.closerange(keep + 1, 1 << 16)
                os.chdir(self.state.workdir)
                reset_signals()
                holder_loop(child)
            finally:
                os._exit(rc)
        child.close()
        parent.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock = parent
        self._track(pid)
        self.tainted = False
        self.lost_note = ""
        self.nested = []  # a fresh process from the supervisor: a domain of its own
        for holder in self.state.family.holders.values():
            if self in holder.nested:
                holder.nested.remove(self)
        self.park()  # a fresh holder waits for its first cell stopped, like any other

    def _track(self, pid: int) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
        self.pid = pid
        try:
            self.pidfd = os.pidfd_open(pid)
        except OSError:
            self.pidfd = -1

    def park(self) -> None:
        """Stop this holder until its session's next request (issue #24, class 5).

        The holder runs in its cells' interpreter, so a cell can rebind what the holder's
        loop calls (``socket.recv_fds``, ``os.waitpid``...) and have code run while no cell
        does, outside every timeout. A stopped process runs nothing (``SIGSTOP`` cannot
        be caught); ``run_cell`` and ``fork`` resume it, so such code runs only while a
        request of its own session is in flight, within that request's bounds. Waited
        for (the stop is asynchronous), so that the sweep after it finds everything the
        holder could have started.
        """
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 1.0
        while process_state(self.pid) not in STOPPED_OR_GONE and time.monotonic() < deadline:
            time.sleep(0.0002)
        continued_since_stop(self.pid)  # drop a continue of ours the stop made stale
        self.parked = True

    def resume(self) -> None:
        """Let the holder run for a request of its own session (``park`` ends it)."""
        self.parked = False
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGCONT)

    def check_parked(self) -> None:
        """A parked holder found running (someone sent it ``SIGCONT``) is stopped again at
        once and its state is no longer trusted: its session's next request replaces it
        and replays the kept cells (issue #40, class 4)."""
        if not self.parked or not self.alive():
            return
        if continued_since_stop(self.pid) or process_state(self.pid) not in STOPPED_OR_GONE:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGSTOP)
            self.tainted = True

    def alive(self) -> bool:
        if self.pidfd < 0:
            return False
        ready, _, _ = select.select([self.pidfd], [], [], 0)
        return not ready

    def close(self) -> None:
        """Kill this holder (and anything else but the other sessions' holders)."""
        others = self.state.family.holder_pids() - {self.pid}
        if others:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            self.state.sweeper.kill_except(others, timeout=2.0)
        else:
            self.state.sweeper.kill_all(timeout=2.0)
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1

    def _recv(self) -> dict | None:
        """One message from the current holder; anything another process sent is dropped."""
        assert self.sock is not None
        msg, sender = receive_with_sender(self.sock)
        if msg.get("event") == "eof":
            return msg
        return msg if msg and sender == self.pid else None

    def _flush_stale(self) -> None:
        while True:
            msg, sender = receive_with_sender(self.sock)
            if (not msg and not sender) or msg.get("event") == "eof":
                return

    def _restart(self) -> None:
        self.close()
        self._start()

    def _lost(self, why: str = "the session's state holder was gone") -> dict:
        self._restart()
        return {
            "status": "sandbox_error",
            "message": f"{why}; a fresh one was started",
            "state_lost": True,
            "not_run": True,
        }

    def run_cell(self, req: dict) -> dict:
        limits = self.limits
        timeout = float(req.get("timeout") or limits.get("timeout", 10))
        cpu_soft = min(
            cpu_limits({**limits, "timeout": timeout, "cpu_seconds": req.get("cpu_seconds")})[0],
            self.cpu_hard - 1,
        )
        if not self.alive():
            return self._lost(self.lost_note or "the session's state holder was gone")
        if self.tainted:
            return self._lost(TAINTED_NOTE)
        self.resume()
        try:
            self._separate_from_forks()
            return self._run_cell(req, timeout, cpu_soft)
        finally:
            if self.alive() and not self.parked:
                self.park()  # every way out: the holder runs only inside a request

    def _separate_from_forks(self) -> None:
        """Before a cell: a holder whose forks live in domains nested in its own enters a
        new one (``forking.enter_own_domain``), so that its cell cannot signal, trace,
        see or connect to them. Where it cannot (every Landlock layer used), those forks
        are killed instead: their sessions replay on a fresh holder (issue #40)."""
        live = [holder for holder in self.nested if holder.alive()]
        self.nested = []
        if not live or self.sock is None:
            return
        message = {"op": "domain", "landlock": self.state.config.get("landlock")}
        answer: dict = {}
        with contextlib.suppress(OSError):
            self._flush_stale()
            self.sock.send(json.dumps(message).encode())
            deadline = time.monotonic() + DOMAIN_SECONDS
            while time.monotonic() < deadline and answer.get("event") not in ("domain", "eof"):
                ready, _, _ = select.select([self.sock], [], [], deadline - time.monotonic())
                if ready:
                    answer = self._recv() or {}
        if answer.get("ok"):
            return
        for holder in live:
            holder.lost_note = SEPARATION_NOTE
            with contextlib.suppress(OSError):
                os.kill(holder.pid, signal.SIGKILL)

    def _run_cell(self, req: dict, timeout: float, cpu_soft: int) -> dict:
        limits = self.limits
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
            capture.close()
            return self._lost()
        finally:
            for fd in (in_fd, out_w, err_w, code_fd):
                os.close(fd)
        wait = self._wait_for_cell(seq, capture, start + timeout)
        duration = time.monotonic() - start
        return self._settle(wait, capture, timeout, cpu_soft, duration)

    def _wait_for_cell(self, seq: int, capture: Capture, deadline: float) -> CellWait:
        """Pump the cell's output until the holder reports it finished (and, for a cell
        that is to be adopted, until its output reached end-of-file), or time runs out."""
        assert self.sock is not None
        wait = CellWait()
        candidate_fd = -1
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        if self.pidfd >= 0:
            poller.register(self.pidfd, select.POLLIN)
        for fd in capture.open:
            poller.register(fd, select.POLLIN)
        try:
            while not capture.over:
                if wait.candidate and not capture.open:
                    wait.adopted = wait.candidate  # no writer of the cell is left
                    return wait
                if wait.finished and not wait.candidate:
                    return wait
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    wait.timed_out = True
                    return wait
                events = poller.poll(max(1, int(min(remaining, STOPPED_CHECK_SECONDS) * 1000)))
                if not events and not wait.handed_over:
                    continue_if_stopped(self.pid)
                for fd, _ in events:
                    if fd == self.sock.fileno():
                        msg = self._recv()
                        if msg is None:
                            continue
                        if msg.get("event") == "eof":
                            poller.unregister(fd)
                            wait.holder_gone = True
                            return wait
                        if msg.get("event") != "finished" or msg.get("seq") != seq:
                            continue
                        wait.finished = True
                        if msg.get("outcome") == "done":
                            wait.handed_over = True
                            candidate = msg.get("holder")
                            rc = msg.get("rc")
                            wait.rc = rc if isinstance(rc, int) else 1
                            if isinstance(candidate, int) and candidate > 1:
                                try:
                                    candidate_fd = os.pidfd_open(candidate)
                                    poller.register(candidate_fd, select.POLLIN)
                                    wait.candidate = candidate
                                except OSError:
                                    continue
                                # Helpers the cell forked may hold its output open: they
                                # die now, so only the cell itself can delay end-of-file.
                                self.state.sweeper.kill_except(
                                    {candidate, self.pid} | self.state.family.holder_pids()
                                )
                        else:
                            wait.status, wait.cpu = _died_report(msg)
                    elif fd == self.pidfd:
                        poller.unregister(fd)
                        if not wait.handed_over:
                            wait.holder_gone = True
                            return wait
                    elif fd == candidate_fd:
                        wait.candidate = 0  # the would-be holder died before its output ended
                        return wait
                    else:
                        capture.read(fd)
                        if fd not in capture.open:
                            poller.unregister(fd)
            return wait
        finally:
            if candidate_fd >= 0:
                os.close(candidate_fd)

    def _settle(
        self, wait: CellWait, capture: Capture, timeout: float, cpu_soft: int, duration: float
    ) -> dict:
        """Adopt the new holder (or keep the old one), kill everything else, answer."""
        sweeper = self.state.sweeper
        spare = set()
        if wait.adopted:
            previous = self.pid
            self._track(wait.adopted)
            with contextlib.suppress(OSError):
                os.kill(previous, signal.SIGKILL)
            # Killed now (it cannot run anything any more); its teardown and reaping happen
            # after the answer is sent, off the cell's latency.
            self.state.pending_reap.append(previous)
            spare.add(previous)
        # The old holder serves no more cells once it handed its socket over.
        keep_holder = self.alive() and (wait.adopted or not wait.handed_over)
        if keep_holder and wait.finished:
            self.park()  # before the sweep: nothing it starts from now on survives
        sweeper.reaped.clear()
        others = self.state.family.holder_pids() - {self.pid}  # the other sessions' holders
        clean = sweeper.kill_except(({self.pid} if keep_holder else set()) | spare | others)
        if not wait.finished and keep_holder:
            wait.status, wait.cpu = self._await_finished()
            self.park()
            clean = sweeper.kill_except({self.pid} | spare | others) and clean
        capture.drain(time.monotonic() + 1.0)
        capture.close()

        adopted = bool(wait.adopted)
        status_word = ((wait.rc & 0xFF) << 8) if adopted else wait.status
        kind, text = classify(
            status=status_word,
            capture=capture,
            timed_out=wait.timed_out,
            timeout=timeout,
            cpu_seconds=float(cpu_soft),
            cpu_used=wait.cpu,
        )
        if adopted and clean and keep_holder and await_no_zombies({self.pid}):
            # The new holder reaps its cell's children (``chain.reap_children_while_idle``);
            # one that did not (its interpreter rewritten by the cell) is not kept: its
            # zombies would take the process limit its family's next cells need.
            adopted, keep_holder = False, False
            kind, text = "error", ZOMBIES_NOTE
        elif self.state.family.forked and not remove_ipc_objects().clean:
            # The forks of a worker share its IPC namespace: a System V segment the new
            # holder keeps attached would be reachable from a sibling. Its state goes.
            adopted, keep_holder = False, False
            kind, text = "error", FORKED_IPC_NOTE
        elif not adopted and kind == "ok":
            text = (
                "the cell's process exited before the end of the cell; its variables were discarded"
            )
        state_lost = False
        if not clean or not keep_holder:
            self._restart()
            state_lost = True
        notes = [text] if text else []
        if not adopted and kind != "ok" and not state_lost:
            notes.append("variables from earlier cells are kept")
        if state_lost:
            notes.append("the session's state holder was lost and has been restarted empty")
        return result_dict(
            kind,
            "; ".join(notes),
            capture,
            return_code(status_word),
            duration,
            adopted=adopted,
            state_lost=state_lost,
        )

    def _await_finished(self) -> tuple[int | None, float]:
        """After killing a cell, the holder reports its exit; wait briefly for that."""
        assert self.sock is not None
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.sock], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            msg = self._recv()
            if msg is None:
                continue
            if msg.get("event") == "eof":
                break
            if msg.get("event") == "finished" and msg.get("outcome") == "died":
                return _died_report(msg)
        return None, 0.0


@dataclass
class CellWait:
    """What the supervisor learnt while a cell ran (see ``Holder._wait_for_cell``)."""

    finished: bool = False
    """The holder reported the cell's end."""
    handed_over: bool = False
    """The holder gave its socket to the cell (it serves no more cells itself)."""
    candidate: int = 0
    """The pid the holder named as the new holder."""
    adopted: int = 0
    """The candidate, once the cell's output reached end-of-file."""
    rc: int = 1
    status: int | None = None
    cpu: float = 0.0
    timed_out: bool = False
    holder_gone: bool = False


DOMAIN_SECONDS = 5.0
"""Entering a Landlock domain is one system call; this bounds a holder that does not answer."""
SEPARATION_NOTE = (
    "its parent session could not enter a Landlock domain apart from it (a process has "
    "at most 16 layers), so this fork's state holder was ended"
)
TAINTED_NOTE = (
    "the session's state holder ran outside a request (a signal resumed it while it was "
    "parked), so its state is not trusted"
)


def _died_report(msg: dict) -> tuple[int | None, float]:
    status, cpu = msg.get("status"), msg.get("cpu")
    return (status if isinstance(status, int) else None), (
        float(cpu) if isinstance(cpu, (int, float)) else 0.0
    )
