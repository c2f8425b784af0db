"""Turning a finished child into an answer: its capped output and what happened to it.

:class:`Capture` reads the child's stdout/stderr pipes keeping at most ``limit`` bytes of
each; :func:`classify` names the outcome (ok, error, timeout, memory, output_limit) from
the wait status, the capture and the clock, and :func:`result_dict` is the answer frame.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import time

MEMORY_ERROR_LINE = re.compile(r"^([\w.]*MemoryError)\b")


class Capture:
    """Reads a child's stdout/stderr pipes, keeping at most ``limit`` bytes of each."""

    def __init__(self, out_fd: int, err_fd: int, limit: int) -> None:
        self.fds = {out_fd: "stdout", err_fd: "stderr"}
        self.data = {"stdout": bytearray(), "stderr": bytearray()}
        self.truncated = {"stdout": False, "stderr": False}
        self.limit = limit
        self.open = set(self.fds)
        for fd in self.fds:
            os.set_blocking(fd, False)

    @property
    def over(self) -> bool:
        return any(self.truncated.values())

    def read(self, fd: int) -> None:
        name = self.fds[fd]
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            if not chunk:
                self.open.discard(fd)
                return
            buf = self.data[name]
            room = self.limit - len(buf)
            if len(chunk) > room:
                buf += chunk[: max(room, 0)]
                self.truncated[name] = True
            else:
                buf += chunk
            if self.truncated[name]:
                return

    def drain(self, deadline: float) -> None:
        """After every writer is dead: read what is left, until EOF or ``deadline``."""
        poller = select.poll()
        for fd in self.open:
            poller.register(fd, select.POLLIN)
        while self.open and not self.over and time.monotonic() < deadline:
            for fd, _ in poller.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                self.read(fd)
                if fd not in self.open:
                    poller.unregister(fd)

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def text(self, name: str) -> str:
        return bytes(self.data[name]).decode("utf-8", errors="replace")


def status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"killed by signal {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exited with code {os.WEXITSTATUS(status)}"


def return_code(status: int | None) -> int | None:
    if status is None:
        return None
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _memory_error_in(stderr: str) -> bool:
    lines = [line for line in stderr.rstrip().splitlines() if line.strip()]
    return bool(lines) and MEMORY_ERROR_LINE.match(lines[-1]) is not None


def classify(
    *,
    status: int | None,
    capture: Capture,
    timed_out: bool,
    timeout: float,
    cpu_seconds: float | None,
    cpu_used: float,
) -> tuple[str, str]:
    if capture.over:
        which = " and ".join(name for name, cut in capture.truncated.items() if cut)
        return "output_limit", f"{which} exceeded {capture.limit} bytes; the program was killed"
    if timed_out:
        return "timeout", f"timed out after {timeout:g} s (wall clock); the program was killed"
    if status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU or (
            sig == signal.SIGKILL and cpu_seconds is not None and cpu_used >= cpu_seconds - 0.05
        ):
            return (
                "timeout",
                f"exceeded the CPU time limit ({cpu_seconds:g} s); the program was killed",
            )
    stderr = capture.text("stderr")
    if status is not None and return_code(status) != 0 and _memory_error_in(stderr):
        return "memory", "the program ran out of memory (MemoryError)"
    if status is None:
        return "error", "the program's exit status is unknown"
    if return_code(status) != 0:
        return "error", status_text(status)
    return "ok", ""


def result_dict(
    status: str, message: str, capture: Capture, code: int | None, duration: float, **extra
) -> dict:
    return {
        "status": status,
        "message": message,
        "stdout": capture.text("stdout"),
        "stderr": capture.text("stderr"),
        "stdout_truncated": capture.truncated["stdout"],
        "stderr_truncated": capture.truncated["stderr"],
        "return_code": code,
        "duration": duration,
        **extra,
    }


def reported_exit(pid: int) -> int | None:
    """The exit code a finished child put in its name (``exit:<code>``), if it did."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            name = f.read().strip()
    except OSError:
        return None
    if name.startswith(b"exit:") and name[5:].isdigit():
        return int(name[5:])
    return None
