"""Telling a cancellation of the run from a ``CancelledError`` raised inside a group.

``asyncio.CancelledError`` means two different things to the collector. When the run
is stopped (Ctrl-C, a caller's timeout, the collector aborting on a store error) the
task was asked to stop (``Task.cancel``) and must stop. But an episode can also see
one that nobody asked of the collector: an SDK's cancel scope raising into the
caller (the MCP client does when its server dies mid-call), or an awaited task that
someone else cancelled. Such an error belongs to its group, like any other failure:
left as it is, a task group drops the cancelled child without a word, and the group
vanishes from the store.

:func:`cancel_requested` tells them apart by the task's own count of requests to stop
(``Task.cancelling``). Python 3.11's ``TaskGroup`` can leave its own request counted
after a child fails (it undoes it only if the child failed before ``__aexit__``
started waiting; fixed in 3.12), which :func:`forget_group_cancel` undoes so the
count stays truthful.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from agentenvs.envs.errors import AgentEnvsError

T = TypeVar("T")


class CancelledInside(AgentEnvsError, RuntimeError):
    """An await inside a group was cancelled by something other than the collector (an
    awaited task cancelled elsewhere, a client library's cancel scope)."""


STRAY_CANCEL = (
    "cancelled from inside the group (an awaited task or a client library's cancel "
    "scope), not by the collector"
)


def cancel_requested() -> bool:
    """Whether the current task was asked to stop: a ``CancelledError`` seen while none
    was asked for came from inside the work, not from whoever runs it."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def cancels_as_errors(coro: Coroutine[Any, Any, T]) -> T:
    """``await coro``; a ``CancelledError`` nobody asked of this task is raised as
    :class:`CancelledInside`, an ordinary error its task group acts on (it stops the
    siblings and reports it) instead of a cancelled child it ignores."""
    try:
        return await coro
    except asyncio.CancelledError as err:
        if cancel_requested():
            raise
        raise CancelledInside(STRAY_CANCEL) from err


def forget_group_cancel(before: int) -> None:
    """After a task group raised its children's errors, undo the one request to stop
    the current task that the group made and Python 3.11 leaves counted (see the
    module docstring); ``before`` is the count when the group started. A group asks at
    most once, and where it undid its own request this does nothing."""
    task = asyncio.current_task()
    if task is not None and task.cancelling() > before:
        task.uncancel()
