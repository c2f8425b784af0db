"""Running a collection's event loop with a shutdown that ends within a bound.

``asyncio.run`` ends by cancelling every task still pending and waiting for all of
them, without limit. A run whose groups failed can leave tasks behind that never
finish once cancelled: a sandbox pool's replacement worker caught half started (its
subprocess pipes being connected) and the readers of its pipes. ``agentenvs rollout
retool`` without the ``retool`` extra hung there in 6 of 19 runs (in process, 5 of 5),
after its data was already stored.

:func:`run_bounded` runs a coroutine as ``asyncio.run`` does (Ctrl-C cancels it and
then raises ``KeyboardInterrupt``), then gives the leftover tasks
:data:`SHUTDOWN_GRACE_S` seconds to finish once cancelled, the same to async
generators and the default executor, and abandons what is still pending: the
process goes on (and exits) instead of waiting for it. Abandoned tasks are named in
a debug log; their loop is left open and kept until the process exits, and the
"Event loop is closed" complaints of their pipes' finalizers at exit are not
printed: the run is over and its data stored, so there is nothing to act on.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import signal
import sys
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

GRACE_VAR = "AGENTENVS_SHUTDOWN_GRACE_S"
SHUTDOWN_GRACE_S = 5.0
"""Seconds leftover tasks get to finish once cancelled at the end of a run (and the
same again for async generators and the default executor); ``$AGENTENVS_SHUTDOWN_GRACE_S``
sets another."""


def shutdown_grace() -> float:
    try:
        return max(0.0, float(os.environ.get(GRACE_VAR, SHUTDOWN_GRACE_S)))
    except ValueError:
        return SHUTDOWN_GRACE_S


def run_bounded(main: Coroutine[Any, Any, T], *, grace: float | None = None) -> T:
    """``asyncio.run(main)`` whose shutdown ends within a bound (see the module docstring)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # none: the usual case
        pass
    else:
        main.close()
        raise RuntimeError("run_bounded() cannot be called from a running event loop: await it")
    grace = shutdown_grace() if grace is None else grace
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # as asyncio.run does: subprocess watchers look it up
    interrupts = 0
    task = loop.create_task(main)

    def on_sigint(signum: int, frame: Any) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1 and not task.done():
            task.cancel()
            loop.call_soon_threadsafe(lambda: None)  # wake a loop blocked in select()
            return
        raise KeyboardInterrupt

    handler = _install_sigint(on_sigint)
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        if interrupts and task.uncancel() == 0:
            raise KeyboardInterrupt from None
        raise
    finally:
        if handler is not None and signal.getsignal(signal.SIGINT) is handler:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        abandoned: set[asyncio.Task] = set()
        try:
            abandoned = _shut_down(loop, grace)
        finally:
            asyncio.set_event_loop(None)
            if abandoned:
                _park(loop, abandoned)
            else:
                loop.close()


def _install_sigint(handler: Any) -> Any:
    """Ctrl-C cancels the run (as ``asyncio.run`` arranges), where signals can be set."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return None
    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # an interpreter whose main thread takes no signals
        return None
    return handler


def _shut_down(loop: asyncio.AbstractEventLoop, grace: float) -> set[asyncio.Task]:
    """Cancel the leftover tasks and wait ``grace`` seconds at most for each stage; the
    tasks still pending after that."""
    pending: set[asyncio.Task] = set()
    leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in leftovers:
        task.cancel()
    if leftovers:
        _, pending = loop.run_until_complete(asyncio.wait(leftovers, timeout=grace))
        for task in leftovers:
            if task.done() and not task.cancelled() and task.exception() is not None:
                loop.call_exception_handler(
                    {
                        "message": "unhandled exception during shutdown",
                        "exception": task.exception(),
                        "task": task,
                    }
                )
        if pending:
            names = sorted(_coroutine_name(task) for task in pending)
            logger.debug(
                "%d task(s) still pending %.1f s after the run was cancelled, abandoned: %s",
                len(pending),
                grace,
                ", ".join(names),
            )
    for stage in (loop.shutdown_asyncgens(), loop.shutdown_default_executor()):
        with contextlib.suppress(TimeoutError):
            loop.run_until_complete(asyncio.wait_for(stage, grace))
    return pending


_PARKED: list[tuple[asyncio.AbstractEventLoop, set[asyncio.Task]]] = []
"""Loops whose run left tasks that would not stop, kept as they are until the process
exits: closing the loop under them (or letting them be collected) makes their
transports and the child watcher complain on stderr about a loop that is gone."""


def _park(loop: asyncio.AbstractEventLoop, abandoned: set[asyncio.Task]) -> None:
    default = loop.get_exception_handler()

    def quiet_about_abandoned(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("task") in abandoned:
            return  # "Task was destroyed but it is pending!": we know, we left it
        if default is not None:
            default(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(quiet_about_abandoned)
    _PARKED.append((loop, abandoned))
    if sys.unraisablehook is not _quiet_about_parked_transports:
        global _previous_unraisablehook
        _previous_unraisablehook = sys.unraisablehook
        sys.unraisablehook = _quiet_about_parked_transports


_previous_unraisablehook = sys.unraisablehook


def _quiet_about_parked_transports(unraisable: Any) -> None:
    """At interpreter exit a parked loop may be collected before the subprocess pipes
    of its abandoned tasks, whose finalizers then fail on the closed loop ("Exception
    ignored ... Event loop is closed"): nothing is lost (the run ended, its data is
    stored), so that one message is not printed. Everything else goes on as before."""
    from_asyncio = inspect.isfunction(unraisable.object) and (
        unraisable.object.__module__ or ""
    ).startswith("asyncio.")
    closed = isinstance(unraisable.exc_value, RuntimeError) and (
        str(unraisable.exc_value) == "Event loop is closed"
    )
    if not (from_asyncio and closed):
        _previous_unraisablehook(unraisable)


def _coroutine_name(task: asyncio.Task) -> str:
    coro = task.get_coro()
    return coro.__qualname__ if inspect.iscoroutine(coro) else task.get_name()
