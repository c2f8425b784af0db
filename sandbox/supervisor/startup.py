"""The supervisor's start-up: what it loads once, and what it drops before serving.

Loading (``load_libraries``): Debian's site directories, the pre-imported packages and
the host's warm-up code, so that every forked child starts with them already in memory.
Dropping (``confine_supervisor``): dumpability, the subreaper role, the Landlock rulesets
its children apply, and the seccomp filter (loaded here, inherited by every child), with
the stages its children stack on top. What happened goes into the ``hello`` frame; a
restriction the host asked for that cannot be applied puts ``fatal`` in it, and the
supervisor serves nothing (fail closed, issue #40).
"""

from __future__ import annotations

import base64
import gc
import os
import sys
import time

from .forking import read_only_spec
from .restrictions import (
    CHILD_SECCOMP,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    READ_ONLY_SECCOMP,
    Landlock,
    apply_seccomp,
    prctl,
    vm_bytes,
)
from .state import WorkerState


def load_libraries(config: dict, hello: dict) -> None:
    """Site directories, pre-imports and the warm-up (a broken package does not stop us)."""
    for entry in config.get("python_path", []):
        path = entry.format(major=sys.version_info[0], minor=sys.version_info[1])
        if path not in sys.path:
            sys.path.append(path)
    preloaded, errors = [], {}
    for name in config.get("preload", []):
        try:
            __import__(name)
            preloaded.append(name)
        except BaseException as exc:  # a broken optional package must not stop the worker
            errors[name] = f"{type(exc).__name__}: {exc}"
    hello.update(preloaded=preloaded, preload_errors=errors)
    warmup = config.get("warmup")
    if warmup:
        # Trusted code from the host, run once here so that every forked child starts
        # with the libraries' lazy imports and caches already filled.
        started = time.monotonic()
        try:
            exec(compile(warmup, "<warmup>", "exec"), {"__name__": "__warmup__"})
            hello["warmup_seconds"] = round(time.monotonic() - started, 3)
        except BaseException as exc:
            hello["warmup_error"] = f"{type(exc).__name__}: {exc}"


def confine_supervisor(state: WorkerState, hello: dict) -> None:
    """Drop what the supervisor itself may do, and prepare what its children drop."""
    config = state.config
    prctl(PR_SET_DUMPABLE, 0)  # /proc/<supervisor>/{mem,environ} unreadable by the code
    if config.get("subreaper", True):
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    spec = config.get("landlock")
    if spec is not None:
        scope = bool(config.get("landlock_scope_signals", True))
        state.landlock = Landlock(spec, scope_signals=scope)
        state.read_only_landlock = Landlock(read_only_spec(spec), scope_signals=scope)
        hello.update(landlock_abi=state.landlock.abi, landlock_error=state.landlock.error)
        broken = state.landlock.error or state.read_only_landlock.error
        if state.landlock.abi >= 1 and broken:
            # the kernel has Landlock but a rule of ours did not go in: fail closed
            hello["fatal"] = f"the Landlock ruleset is incomplete: {broken}"
    else:
        hello.update(landlock_abi=None, landlock_error="disabled by the host")
    bpf = config.get("seccomp_bpf")
    if bpf:
        error = apply_seccomp(base64.b64decode(bpf))
        hello.update(seccomp=error is None, seccomp_error=error)
        if error is not None:  # the host asked for a filter: never serve without it
            hello["fatal"] = f"the seccomp filter could not be loaded: {error}"
    else:
        hello.update(seccomp=False, seccomp_error="no filter given by the host")
    stages = config.get("seccomp_stages") or {}
    if hello["seccomp"] and stages.get("children"):
        # loaded by every child (the supervisor itself renices long runs)
        CHILD_SECCOMP[:] = [base64.b64decode(stages["children"])]
    if hello["seccomp"] and stages.get("read_only"):
        # loaded by every holder of a family that forked (``forking``)
        READ_ONLY_SECCOMP[:] = [base64.b64decode(stages["read_only"])]
    hello.update(child_seccomp=bool(CHILD_SECCOMP), read_only_seccomp=bool(READ_ONLY_SECCOMP))


def enter_workdir(state: WorkerState, hello: dict) -> None:
    try:
        os.chdir(state.workdir)
    except OSError as exc:
        hello["workdir_error"] = str(exc)


def settle_heap(hello: dict) -> None:
    """Keep the pre-imported heap out of the collector: fewer copy-on-write faults."""
    gc.collect()
    gc.freeze()
    hello["vm_bytes"] = vm_bytes()
