"""The executor interface: the seam between the collector and where episodes run.

A collection opens one :class:`GroupRunner` per ``collect`` call with
:meth:`GroupExecutor.start`, asks it to run each group (retries and timeouts
included) and closes it at the end. The executor object itself may outlive many
runs (a Ray executor keeps its actors warm across the many small ``collect``
calls of a streaming collection), so starting a runner must be cheap.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from agentenvs.envs.types import EnvGroupBuilder
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.policies.base import Policy, PolicyFactory


class GroupRunner(ABC):
    """Runs the groups of one ``collect`` call."""

    @abstractmethod
    async def run_group(
        self, builder: EnvGroupBuilder, key: str, *, retries: int, group_timeout: float | None
    ) -> GroupRecord:
        """Run one group to an ``ok`` or ``failed`` record; never raise for the group's own
        failures (an env error, a timeout, a lost worker): those belong in the record.

        The record's ``key``, ``group``, ``status``, ``error`` and ``attempts`` are
        filled; the collector adds env, config, provenance, run and advantages."""

    def described_policy(self, record: GroupRecord, policy: object) -> object:
        """The policy whose provenance the record should carry.

        The driver's own policy by default; an executor that built its own policy
        copies elsewhere (inside Ray actors) returns what those copies reported,
        so a model name found on the server is recorded."""
        return policy

    async def close(self) -> None:
        """Release what this run holds (its share of the object store, say)."""


class GroupExecutor(ABC):
    """Makes runners; see the module docstring for the life cycle."""

    name: str = "executor"

    @abstractmethod
    async def start(
        self, policy: Policy | PolicyFactory, builders: Sequence[EnvGroupBuilder]
    ) -> GroupRunner:
        """A runner for these builders (every group the collection will run) and policy."""

    async def close(self) -> None:
        """Release what the executor holds across runs (actors, a Ray it started)."""
