"""A group's attempts: retried with fresh envs, bounded in time, ended in one record.

Every executor runs a group through :func:`run_group_attempts` where its episodes
run (in this process, or inside a Ray actor), so retries and timeouts mean the
same everywhere and a group's own failure never escapes as an exception: it is a
``failed`` record naming each attempt's error.
"""

from __future__ import annotations

import asyncio

from agentenvs.envs.types import EnvGroupBuilder
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.rollouts import current_group_key, do_group_rollout
from agentenvs.rollout.policies.base import Policy, PolicyFactory


def describe_error(err: BaseException) -> str:
    """``"Type: message"`` (or the type alone): how an error is named in a record."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


async def run_group_attempts(
    builder: EnvGroupBuilder,
    policy: Policy | PolicyFactory,
    key: str,
    *,
    retries: int,
    group_timeout: float | None,
) -> GroupRecord:
    """Roll the group out, trying again with fresh envs up to ``retries`` more times
    when an attempt raises or takes longer than ``group_timeout`` seconds.

    The record has its key, group (or error), status and attempts; the collector
    stamps the rest. ``key`` is the group's :data:`current_group_key` meanwhile.
    """
    token = current_group_key.set(key)
    errors: list[str] = []
    try:
        for attempt in range(1, retries + 2):
            try:
                async with asyncio.timeout(group_timeout) as deadline:
                    group = await do_group_rollout(builder, policy)
            except TimeoutError as err:
                if deadline.expired():
                    errors.append(f"TimeoutError: group took longer than {group_timeout:g}s")
                else:
                    errors.append(describe_error(err))
            except Exception as err:
                errors.append(describe_error(err))
            else:
                return GroupRecord(key=key, env="", task_id="", group=group, attempts=attempt)
    finally:
        current_group_key.reset(token)
    attempts = len(errors)
    history = "; ".join(f"attempt {n}: {e}" for n, e in enumerate(errors, start=1))
    message = f"failed after {attempts} attempt{'s' if attempts > 1 else ''}: {history}"
    return GroupRecord(
        key=key, env="", task_id="", group=None, status="failed", error=message, attempts=attempts
    )
