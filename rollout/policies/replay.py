"""The replay policy: play back the actions of a saved trajectory file.

Useful to re-score recorded episodes after an environment change, to reproduce a
bug, and to check that an environment is deterministic: the policy verifies that
each observation it is shown equals the recorded one and stops with
``replay diverged at turn k`` when it does not.

Which recorded trajectory an env replays: inside the collector, the group's store
key and the trajectory's index within the group (so a rerun over the same
builders replays each group onto itself). Without a key (``do_group_rollout``
called directly), the first recorded trajectory at that index whose observations
match every observation seen so far.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentenvs.envs.types import Env, StopCondition, TokensWithLogprobs, Trajectory
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.rollouts import current_slot
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies.base import PolicyError


class ReplayPolicy:
    """A :data:`PolicyFactory` over the ``ok`` groups of a trajectory file."""

    per_env = True

    def __init__(self, records: list[GroupRecord], *, source: str = "<records>") -> None:
        self.source = source
        self.groups: dict[str, list[Trajectory]] = {}
        for record in records:
            if record.status == "ok" and record.group is not None:
                self.groups[record.key] = record.group.trajectories
        if not self.groups:
            raise ValueError(f"{source} holds no completed groups to replay")

    @classmethod
    def from_file(cls, path: str | Path) -> ReplayPolicy:
        store = TrajectoryStore(path)
        if not store.path.is_file():
            raise FileNotFoundError(f"no trajectory file to replay at {store.path}")
        return cls(list(store.latest().values()), source=str(store.path))

    def __call__(self, env: Env) -> ReplayEnvPolicy:
        slot = current_slot.get()
        index = slot.traj_index if slot is not None else 0
        key = slot.group_key if slot is not None else None
        if key is not None:
            trajectories = self.groups.get(key)
            if trajectories is None:
                raise PolicyError(f"{self.source} has no completed group with key {key!r}")
            if index >= len(trajectories):
                raise PolicyError(
                    f"group {key!r} in {self.source} has {len(trajectories)} trajectories; "
                    f"no trajectory {index} to replay"
                )
            return ReplayEnvPolicy([(f"{key}/{index}", trajectories[index])], self.source)
        candidates = [
            (f"{k}/{index}", trajectories[index])
            for k, trajectories in self.groups.items()
            if index < len(trajectories)
        ]
        return ReplayEnvPolicy(candidates, self.source)

    def provenance(self) -> dict[str, Any]:
        return {"policy": "replay", "source": self.source}


class ReplayEnvPolicy:
    """Replays one recorded trajectory, or, without a group key, the first of several
    candidates consistent with every observation seen so far (tasks whose prompts
    look alike are told apart by the env's later answers)."""

    def __init__(self, candidates: list[tuple[str, Trajectory]], source: str) -> None:
        self.candidates = candidates
        self.source = source
        self.turn = 0

    def sees_images(self) -> bool:
        """It replays recorded tokens; the images are the env's, as recorded."""
        return True

    async def __call__(
        self, observation: list[int], stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        k = self.turn
        turn = k + 1  # turns are numbered from 1, like the env's own count
        if len(self.candidates) != 1:
            matching = [
                (label, traj)
                for label, traj in self.candidates
                if len(traj.transitions) > k and traj.transitions[k].ob == observation
            ]
            if not matching:
                raise PolicyError(
                    f"replay diverged at turn {turn}: {self.source} has no recorded "
                    "trajectory matching this observation"
                )
            self.candidates = matching
        label, trajectory = self.candidates[0]
        transitions = trajectory.transitions
        if k >= len(transitions):
            raise PolicyError(
                f"replay of {label} ran out of recorded turns at turn {turn} "
                f"(recorded {len(transitions)})"
            )
        recorded = transitions[k]
        if recorded.ob != observation:
            raise PolicyError(
                f"replay diverged at turn {turn} of {label}: "
                f"{_first_difference(recorded.ob, observation)}"
            )
        ac = recorded.ac
        # Later observations only tell apart candidates that took this same action.
        self.candidates = [
            (other_label, other)
            for other_label, other in self.candidates
            if other.transitions[k].ac.tokens == ac.tokens
        ]
        self.turn += 1
        logprobs = None if ac.logprobs is None else list(ac.logprobs)
        return TokensWithLogprobs(list(ac.tokens), logprobs, ac.stop_reason)


def _first_difference(expected: list[int], actual: list[int]) -> str:
    for position, (a, b) in enumerate(zip(expected, actual, strict=False)):
        if a != b:
            return f"observation token {position} is {b}, recorded {a}"
    return f"observation has {len(actual)} tokens, recorded {len(expected)}"
