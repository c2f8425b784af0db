"""The in-process executor: every episode is a task on the caller's event loop.

This is the collector's original behaviour and its default: no processes, no
serialization, the policy and the environments are the caller's own objects.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentenvs.envs.types import EnvGroupBuilder
from agentenvs.rollout.collect.attempts import run_group_attempts
from agentenvs.rollout.collect.executors.base import GroupExecutor, GroupRunner
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.policies.base import Policy, PolicyFactory


class InProcessRunner(GroupRunner):
    def __init__(self, policy: Policy | PolicyFactory) -> None:
        self.policy = policy

    async def run_group(
        self, builder: EnvGroupBuilder, key: str, *, retries: int, group_timeout: float | None
    ) -> GroupRecord:
        return await run_group_attempts(
            builder, self.policy, key, retries=retries, group_timeout=group_timeout
        )


class InProcessExecutor(GroupExecutor):
    name = "in-process"

    async def start(
        self, policy: Policy | PolicyFactory, builders: Sequence[EnvGroupBuilder]
    ) -> GroupRunner:
        return InProcessRunner(policy)
