"""A group's attempts: retried with fresh envs, bounded in time, ended in one record.

Every executor runs a group through :func:`run_group_attempts` where its episodes
run (in this process, or inside a Ray actor), so retries and timeouts mean the
same everywhere and a group's own failure never escapes as an exception: it is a
``failed`` record naming each attempt's error, with the last error's traceback.

An error raised by environment code (:mod:`~agentenvs.rollout.collect.env_code`)
is not retried unless it is transient (:func:`agentenvs.envs.errors.is_transient`):
a bug in ``step`` raises the same way on fresh envs, and three identical failures
only cost time and bury the traceback. Errors of the policy or its server, and
attempts that run out of time, are retried as before.

A ``CancelledError`` that nobody asked of the collector's task (an SDK's cancel scope
raising into the episode, an awaited task someone else cancelled:
:mod:`~agentenvs.rollout.collect.cancels`) is an error of the attempt like any
other, so the group still ends as a record; a cancellation of the collector itself
(Ctrl-C, a caller's timeout) stops the run as before.
"""

from __future__ import annotations

import asyncio
import traceback

from agentenvs.envs.errors import is_transient
from agentenvs.envs.types import EnvGroupBuilder
from agentenvs.rollout.collect.cancels import STRAY_CANCEL, cancel_requested
from agentenvs.rollout.collect.env_code import noting_env_errors
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.rollouts import current_group_key, do_group_rollout
from agentenvs.rollout.policies.base import Policy, PolicyFactory

NOT_RETRIED = "not retried: environment errors are retried only when transient"

MAX_TRACEBACK_CHARS = 20_000
"""A stored traceback keeps its last this many characters (the raising frames)."""


def describe_error(err: BaseException) -> str:
    """``"Type: message"`` (or the type alone): how an error is named in a record."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def format_traceback(err: BaseException) -> str:
    """The error's traceback as Python prints it, bounded to its last frames."""
    text = "".join(traceback.format_exception(err))
    if len(text) > MAX_TRACEBACK_CHARS:
        text = "...(earlier frames cut)\n" + text[-MAX_TRACEBACK_CHARS:]
    return text


async def run_group_attempts(
    builder: EnvGroupBuilder,
    policy: Policy | PolicyFactory,
    key: str,
    *,
    retries: int,
    group_timeout: float | None,
) -> GroupRecord:
    """Roll the group out, trying again with fresh envs up to ``retries`` more times
    when an attempt raises (see the module docstring for what is not retried) or
    takes longer than ``group_timeout`` seconds.

    The record has its key, group (or error and traceback), status and attempts;
    the collector stamps the rest. ``key`` is the group's :data:`current_group_key`
    meanwhile.
    """
    token = current_group_key.set(key)
    errors: list[str] = []
    last_traceback: str | None = None
    try:
        for attempt in range(1, retries + 2):
            with noting_env_errors() as env_errors:
                try:
                    async with asyncio.timeout(group_timeout) as deadline:
                        group = await do_group_rollout(builder, policy)
                except TimeoutError as err:
                    if deadline.expired():
                        errors.append(f"TimeoutError: group took longer than {group_timeout:g}s")
                    else:
                        errors.append(describe_error(err))
                    last_traceback = format_traceback(err)
                except asyncio.CancelledError as err:
                    if cancel_requested():
                        raise  # the run is stopping: not this group's failure
                    errors.append(f"{describe_error(err)} ({STRAY_CANCEL})")
                    last_traceback = format_traceback(err)
                except Exception as err:
                    last_traceback = format_traceback(err)
                    where = env_errors.where(err)
                    if where is not None and not is_transient(err):
                        errors.append(f"{describe_error(err)} (raised in {where}; {NOT_RETRIED})")
                        break
                    errors.append(describe_error(err))
                else:
                    return GroupRecord(key=key, env="", task_id="", group=group, attempts=attempt)
    finally:
        current_group_key.reset(token)
    return failed_record(key, errors, last_traceback)


def failed_record(key: str, errors: list[str], traceback_text: str | None) -> GroupRecord:
    """A ``failed`` record naming each attempt's error (the collector stamps the rest)."""
    attempts = len(errors)
    history = "; ".join(f"attempt {n}: {e}" for n, e in enumerate(errors, start=1))
    message = f"failed after {attempts} attempt{'s' if attempts > 1 else ''}: {history}"
    return GroupRecord(
        key=key,
        env="",
        task_id="",
        group=None,
        status="failed",
        error=message,
        attempts=attempts,
        traceback=traceback_text,
    )
