"""A collection's plan: what each group is called, what it says of itself, what to skip.

What a record says about its group (task id, env name, config) comes from one
place: the builder's :meth:`~agentenvs.envs.types.EnvGroupBuilder.describe`. The
run identity is made from the first group's description the same way, and so is
its provenance (:mod:`~agentenvs.rollout.collect.provenance`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentenvs.envs.types import EnvGroupBuilder, GroupDescription
from agentenvs.rollout.collect.options import check_keys
from agentenvs.rollout.collect.provenance import policy_provenance
from agentenvs.rollout.collect.run_identity import (
    RunIdentity,
    identity_for_collection,
    keys_to_skip,
)
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies.base import Policy, PolicyFactory


def task_id(index: int, description: GroupDescription) -> str:
    """The group's task id as recorded: the builder's, else its position."""
    return str(index if description.task_id is None else description.task_id)


def group_key(index: int, description: GroupDescription) -> str:
    """``"<position>:<task id>"``: stable across reruns over the same builders."""
    return f"{index}:{task_id(index, description)}"


def default_key(index: int, builder: EnvGroupBuilder) -> str:
    """The key a group gets when the caller names none (:func:`group_key`)."""
    return group_key(index, builder.describe())


@dataclass(frozen=True)
class PlannedGroup:
    """One group to run: its position among the builders, its key, its description."""

    index: int
    key: str
    builder: EnvGroupBuilder
    description: GroupDescription

    @property
    def task_id(self) -> str:
        return task_id(self.index, self.description)


@dataclass(frozen=True)
class CollectionPlan:
    groups: list[PlannedGroup]
    """The groups to run, in the builders' order (those the store holds left out)."""
    skipped: int
    """Groups the store already holds as this run's ``ok``."""
    identity: RunIdentity


def collection_identity(
    first: GroupDescription | None, policy: Policy | PolicyFactory
) -> RunIdentity:
    """The run identity records are stamped with and resumed by (see the module docstring)."""
    return identity_for_collection(
        first or GroupDescription(), described_policy=policy_provenance(policy)
    )


def plan_collection(
    builders: Sequence[EnvGroupBuilder],
    policy: Policy | PolicyFactory,
    *,
    keys: Sequence[str] | None = None,
    store: TrajectoryStore | None = None,
    new_run: bool = False,
) -> CollectionPlan:
    """Describe every group, name it (``keys`` or :func:`default_key`), and leave out
    the groups ``store`` holds; refuses a store of another run
    (:class:`~agentenvs.rollout.collect.run_identity.RunMismatchError`) unless
    ``new_run``."""
    described = [builder.describe() for builder in builders]
    if keys is None:
        keys = [group_key(i, d) for i, d in enumerate(described)]
    check_keys(keys, len(builders))
    identity = collection_identity(described[0] if described else None, policy)
    done: set[str] = set()
    if store is not None:
        config = described[0].config if described else None
        done = keys_to_skip(
            store.path, store.resume_facts(), identity, new_run=new_run, config=config
        )
    groups = [
        PlannedGroup(i, key, builder, description)
        for i, (key, builder, description) in enumerate(zip(keys, builders, described, strict=True))
        if key not in done
    ]
    return CollectionPlan(groups, len(builders) - len(groups), identity)
