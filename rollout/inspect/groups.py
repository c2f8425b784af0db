"""One stored group as every check sees it, and the shape of a check that reads groups.

``check`` reads a store one group at a time (memory bounded by the largest group,
not the store): each check is a :class:`GroupCheck` that takes groups as they come
and says what it found at the end. A group's training samples are cut once and
shared by every check that reads samples.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentenvs.envs.types import Trajectory
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.data.samples import TrainingSample, trajectory_to_samples
from agentenvs.rollout.inspect.findings import Finding


@dataclass
class GroupView:
    """An ok record, its per-trajectory rewards and advantages, and its samples."""

    record: GroupRecord
    position: int
    """Its index among the store's ok groups (a hand-off's ``group_index``)."""
    rewards: list[float] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    samples: list[TrainingSample] = field(default_factory=list)
    """Cut with the stored advantages; a trajectory whose logprobs do not fit its
    tokens has none (the logprob check reports it)."""

    @classmethod
    def of(cls, record: GroupRecord, position: int) -> GroupView:
        assert record.group is not None
        rewards = record.group.total_rewards()
        advantages = [float(a) for a in record.extra.get("advantages") or [0.0] * len(rewards)]
        view = cls(record, position, rewards, advantages)
        for t, (traj, adv) in enumerate(zip(record.group.trajectories, advantages, strict=False)):
            try:
                view.samples += trajectory_to_samples(traj, adv, traj_index=t, reward=rewards[t])
            except ValueError:
                continue
        return view

    @property
    def key(self) -> str:
        return self.record.key

    @property
    def estimator(self) -> dict[str, Any] | None:
        found = self.record.extra.get("advantage_estimator")
        return found if isinstance(found, dict) else None

    @property
    def estimator_json(self) -> str:
        return json.dumps(self.record.extra.get("advantage_estimator"), sort_keys=True)

    def trajectories(self) -> Iterator[tuple[int, Trajectory]]:
        assert self.record.group is not None
        yield from enumerate(self.record.group.trajectories)

    def where(self, traj: int | None = None, turn: int | None = None) -> str:
        place = f"group {self.key}"
        if traj is not None:
            place += f" traj {traj}"
        if turn is not None:
            place += f" turn {turn}"
        return place


class GroupCheck(Protocol):
    """A check that reads a store's ok groups one at a time."""

    def add(self, view: GroupView) -> None: ...

    def findings(self) -> list[Finding]: ...


@dataclass
class FirstFailure:
    """The first failing finding a check met (later ones are not looked for)."""

    finding: Finding | None = None

    def keep(self, finding: Finding | None) -> None:
        if self.finding is None and finding is not None and finding.status == "fail":
            self.finding = finding

    @property
    def found(self) -> bool:
        return self.finding is not None
