"""Forking live episodes: the copy helpers every environment's ``fork()`` is built from.

A fork is a new episode whose past equals the original's (same context tokens, same
chat history, same stop sequences, same task state) and whose future is its own. Two
kinds of state need two treatments:

* plain Python state (counters, lists of past actions, the oracle's bookkeeping) is
  copied: :func:`copy_task_state` deep-copies a task object but keeps the parts it is
  told are shared and read-only (the config, the dataset row, a retriever, a
  tokenizer), so a fork costs microseconds and never duplicates an index;
* external state (a sandbox session, a game engine) is forked by the environment
  itself, after the copy, because only it knows how (see ReTool and ALFWorld).

:func:`fork_rendered` forks the token-level :class:`~agentenvs.envs.rendered_env.RenderedEnv`
around a task: its own containers are copied generically (every list, dict and set in
its ``__dict__``), so fields added to it later are forked too without a change here.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, TypeVar

from agentenvs.envs.types import ForkUnsupported

if TYPE_CHECKING:
    from agentenvs.envs.rendered_env import RenderedEnv

T = TypeVar("T")


def copy_task_state(task: T, *, shared: tuple[Any, ...] = ()) -> T:
    """A deep copy of ``task`` in which every object of ``shared`` stays the same object.

    Deep copying with a pre-filled memo is how ``copy`` is told "this one is already
    copied": the shared objects are then referenced, not duplicated, wherever they
    appear in the task's state.
    """
    memo: dict[int, Any] = {id(obj): obj for obj in shared if obj is not None}
    return copy.deepcopy(task, memo)


def _copy_containers(obj: Any) -> None:
    """Give ``obj`` its own copy of every list, dict and set it holds (one level deep;
    the items are either immutable or replaced, never mutated, by the owner)."""
    for name, value in list(vars(obj).items()):
        if isinstance(value, list):
            setattr(obj, name, [dict(v) if isinstance(v, dict) else v for v in value])
        elif isinstance(value, dict | set):
            setattr(obj, name, copy.copy(value))


async def fork_rendered(env: RenderedEnv) -> RenderedEnv:
    """Fork a token-level episode: the renderer's memo and the env's records are copied,
    the task forks itself. A finished or closed episode has nothing left to fork."""
    if env.done or env.closed:
        raise ForkUnsupported("a finished episode cannot be forked")
    if not env.context:
        raise ForkUnsupported("fork after initial_observation(): the episode has not started")
    task = await env.task.fork()
    clone = copy.copy(env)
    _copy_containers(clone)
    clone.renderer = copy.copy(env.renderer)
    clone.task = task
    return clone
