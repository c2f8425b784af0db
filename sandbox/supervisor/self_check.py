"""The ``probe`` request: a child restricted exactly like an execution reports what it can do.

The capability report is measured, not assumed: the child goes through the same
restrictions a run's child does (``restrict_process``) and writes ``probe_report``'s
findings on its stdout; the worker is reset afterwards like after any run.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable

from .outcome import Capture
from .probe import probe_report
from .reset import WorkerReset
from .restrictions import cpu_limits, restrict_process
from .runs import wait_for_child
from .state import WorkerState
from .usercode import (
    INTERNAL_ERROR_EXIT,
    flush_std_streams,
    install_std_streams,
    report_internal_failure,
    reset_signals,
    text_fd,
)

PROBE_SECONDS = 30


def spawn_restricted(
    state: WorkerState, body: Callable[[dict], int], limits: dict, cpu: tuple[int, int] | None
) -> tuple[int, Capture]:
    """Fork a child restricted like an execution that runs ``body`` (no stdin)."""
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    in_fd = text_fd(None)
    pid = os.fork()
    if pid == 0:  # child: never returns
        rc = INTERNAL_ERROR_EXIT
        try:
            os.setsid()
            os.dup2(in_fd, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            restricted = restrict_process(limits, state.landlock, cpu=cpu)
            os.closerange(3, 1 << 16)
            os.chdir(state.workdir)
            reset_signals()
            install_std_streams()
            rc = body(restricted)
            flush_std_streams()
        except BaseException:
            report_internal_failure()
        finally:
            os._exit(rc)
    for fd in (out_w, err_w, in_fd):
        os.close(fd)
    return pid, Capture(out_r, err_r, int(limits.get("max_output_bytes", 65536)))


def probe(state: WorkerState, cleanup: WorkerReset, req: dict) -> dict:
    """Fork a child restricted exactly like an execution and report what it can do."""
    limits = req.get("limits", {})
    workdir = state.workdir

    def body(restricted: dict) -> int:
        sys.stdout.write(json.dumps(probe_report(restricted, workdir)))
        return 0

    start = time.monotonic()
    pid, capture = spawn_restricted(state, body, limits, cpu_limits(limits))
    exited, _, _ = wait_for_child(pid, capture, start + PROBE_SECONDS)
    if not exited:
        os.kill(pid, signal.SIGKILL)
    os.wait4(pid, 0)
    capture.drain(time.monotonic() + 1.0)
    capture.close()
    cleanup.dirty = not cleanup.reset()
    try:
        report = json.loads(capture.text("stdout"))
    except ValueError:
        return {
            "ok": False,
            "message": "probe failed",
            "stderr": capture.text("stderr")[-4000:],
        }
    return {"ok": True, "report": report}
