"""Finishing a record: what the collector stamps on a group once it has run.

An executor returns a record with the group (or its error) and the attempts; the
collector adds, in this order, what the stored data must say about itself: the
task, env and config (from the group's :class:`~.plan.PlannedGroup`), the
provenance (built from its description, the policy and the run spec's notes:
:class:`~.provenance.RunProvenance`, refreshed from the policy as it is now), the run
identity, and for an ``ok`` group its tree (tree rollouts) and its advantages with
the estimator that made them, so the store says how its loss inputs were computed.
"""

from __future__ import annotations

from agentenvs.envs.rewards.identity import with_reward_provenance
from agentenvs.rollout.collect.plan import PlannedGroup
from agentenvs.rollout.collect.provenance import RunProvenance, record_provenance
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.run_identity import RunIdentity
from agentenvs.rollout.collect.tree import attach_tree
from agentenvs.rollout.data.advantages import Estimator, estimator_info, group_advantages


class RecordStamps:
    """What every record of one collection is stamped with (see the module docstring).

    Made before the first group runs, so an unknown advantage estimator is refused
    before any work is done."""

    def __init__(
        self,
        identity: RunIdentity,
        provenance: RunProvenance,
        *,
        advantage_estimator: Estimator = "grpo",
        normalize_std: bool | None = None,
    ) -> None:
        self.run = identity.to_json()
        self.provenance = provenance
        self.advantage_estimator: Estimator = advantage_estimator
        self.normalize_std = normalize_std
        self.estimator = estimator_info(advantage_estimator, normalize_std=normalize_std)

    def finish(self, record: GroupRecord, planned: PlannedGroup, described_policy: object) -> None:
        """Stamp ``record`` in place; ``described_policy`` is the policy whose provenance
        it carries (what the executor's runner says sampled it)."""
        description = planned.description
        record.task_id = planned.task_id
        record.env = description.env_name
        record.env_config = dict(description.config)
        base = self.provenance.base(description)
        record.provenance = record_provenance(described_policy, record.group, base)
        # Which reward code scored the group (envs/rewards/identity.py): checked across runs.
        record.provenance = with_reward_provenance(record.provenance, record.env, record.env_config)
        record.run = dict(self.run)
        attach_tree(record.extra, record.group)
        if record.group is not None:
            record.extra["advantages"] = group_advantages(
                record.group.total_rewards(),
                self.advantage_estimator,
                normalize_std=self.normalize_std,
            )
            record.extra["advantage_estimator"] = self.estimator
