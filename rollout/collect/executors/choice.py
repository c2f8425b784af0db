"""``--executor in-process|ray``: the executor a command line asks for.

Kept here, not in the CLI, so that every command offering the choice (``rollout``,
streaming collection) builds the same executor from the same words.
"""

from __future__ import annotations

import sys
from typing import Any

from agentenvs.rollout.collect.executors.base import GroupExecutor
from agentenvs.rollout.collect.executors.in_process import InProcessExecutor
from agentenvs.rollout.collect.executors.spec import PolicySpec

EXECUTORS = ("in-process", "ray")

NETWORK_POLICIES = frozenset({"openai"})
"""Policies that are clients of a server: each Ray actor builds its own."""


def make_executor(
    kind: str,
    *,
    ray_address: str | None = None,
    policy_name: str | None = None,
    policy_options: dict[str, Any] | None = None,
) -> GroupExecutor:
    """The executor for ``kind``; a ``ValueError`` names the choices for anything else.

    For Ray, no address starts a local Ray for the run (stopped by ``close``);
    ``auto`` or ``HOST:PORT`` joins a running cluster, checked here (form, and that
    it answers, within seconds: a :class:`RayAddressError`, a ``ValueError``) so a
    bad address fails before anything loads. The executor says on stderr which Ray
    the run uses."""
    if kind == "in-process":
        if ray_address is not None:
            raise ValueError("--ray-address needs --executor ray")
        return InProcessExecutor()
    if kind != "ray":
        raise ValueError(f"unknown executor {kind!r}; choose one of {', '.join(EXECUTORS)}")
    from agentenvs.rollout.collect.executors.ray_address import resolve
    from agentenvs.rollout.collect.executors.ray_executor import RayExecutor

    if ray_address is not None:
        resolve(ray_address)
    spec = None
    if policy_name in NETWORK_POLICIES:
        spec = PolicySpec(policy_name, dict(policy_options or {}))
    return RayExecutor(address=ray_address, policy_spec=spec, announce=_to_stderr)


def _to_stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
