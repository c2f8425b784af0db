"""The stored form of a finished group: one JSON line per group.

This is the contract between the collector (writes), the store (resume), the
viewer, ``agentenvs check`` and every hand-off (read). Observations are stored
delta-encoded: a transition whose observation extends the previous context
(observation + action) stores only the new tokens, so a long multi-turn episode
costs linear, not quadratic, space. The leaves of a tree rollout go further: a
leaf stores only its part after the branch turn and a reference to its parent for
the shared prefix (``shared_prefix.py``); such a record is format 2, every other
record stays format 1, which older readers still read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from agentenvs.envs.types import Metrics, Trajectory, TrajectoryGroup
from agentenvs.envs.wire import trajectory_from_json, trajectory_to_json
from agentenvs.rollout.collect.fingerprints import group_fingerprint
from agentenvs.rollout.collect.shared_prefix import PrefixRef, encode_leaves, restore_leaves
from agentenvs.rollout.weights.stamps import SampledBy

FORMAT_VERSION = 1
"""A record whose trajectories are all stored whole."""
SHARED_PREFIX_FORMAT = 2
"""A record with at least one leaf stored as a reference to its parent's prefix."""
READABLE_FORMATS = (FORMAT_VERSION, SHARED_PREFIX_FORMAT)


def _trajectory_of(record: dict[str, Any], index: int, data: dict[str, Any]) -> Trajectory:
    """:func:`trajectory_from_json`, its error naming the group and trajectory."""
    try:
        return trajectory_from_json(data)
    except ValueError as err:
        raise ValueError(f"group {record.get('key')} traj {index} {err}") from None


@dataclass
class GroupRecord:
    """A group as stored: its trajectories and everything needed to trust them later."""

    key: str
    """Unique within a run; a rerun skips keys already stored."""
    env: str
    task_id: str
    group: TrajectoryGroup | None
    status: Literal["ok", "failed"] = "ok"
    error: str | None = None
    attempts: int = 1
    traceback: str | None = None
    """A failed group's last error as Python prints it (file, line, frames): what
    ``error`` names in one line, for whoever debugs the environment."""
    env_config: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    """Tokenizer, renderer, sampling settings, policy identity and weights version."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Derived data attached later (advantages and their estimator, for instance)."""
    created: float = field(default_factory=time.time)
    run: dict[str, Any] = field(default_factory=dict)
    """The run's identity (:class:`~agentenvs.rollout.collect.run_identity.RunIdentity`
    as JSON): what a resume compares before appending to this store."""
    stored_prefixes: dict[int, PrefixRef] = field(default_factory=dict, compare=False, repr=False)
    """Leaves that were read as a reference to their parent's prefix (set by
    :meth:`from_json`, so ``agentenvs check`` can compare them with ``extra["tree"]``;
    :meth:`to_json` works them out again from the tree)."""
    collected: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    """What the group held when it was made (``collect/fingerprints.py``): per turn the
    observation's shape and digest, a digest of the sampled ids and logprobs, the step
    reward; per trajectory its sample count. Taken when a record is made with its
    group, kept as read afterwards, so ``agentenvs check`` can tell data edited since
    collection. ``{}``: a record written before this was recorded."""
    stored_total_rewards: list[float] | None = field(default=None, compare=False, repr=False)
    """``total_rewards`` as read from the stored line (``None`` for a record not read),
    so ``agentenvs check`` can compare it with the steps."""

    def __post_init__(self) -> None:
        if self.collected is None:
            self.collected = group_fingerprint(self.group) if self.group is not None else {}

    def sampled_by(self) -> SampledBy:
        """Which weights, which version sampled this group: the recorded
        ``weights_version`` (the oldest of its turns'), every turn's stamp, and the
        policy's full weights identity, read from the stored provenance and logs."""
        return SampledBy.of_group(self.group, self.provenance.get("policy") or {})

    def to_json(self, *, share_prefixes: bool = True) -> dict[str, Any]:
        """The stored form. ``share_prefixes=False`` writes every leaf whole (format 1,
        as before trees were stored by reference)."""
        group = self.group
        trajectories: list[dict[str, Any]] = []
        shared = 0
        if group is not None:
            tree = self.extra.get("tree") if share_prefixes else None
            trajectories, shared = encode_leaves(group.trajectories, tree, trajectory_to_json)
        return {
            "format": SHARED_PREFIX_FORMAT if shared else FORMAT_VERSION,
            "key": self.key,
            "env": self.env,
            "task_id": self.task_id,
            "status": self.status,
            "error": self.error,
            "attempts": self.attempts,
            **({"traceback": self.traceback} if self.traceback is not None else {}),
            "env_config": self.env_config,
            "provenance": self.provenance,
            "extra": self.extra,
            "created": self.created,
            "run": self.run,
            "tags": group.tags if group else [],
            "trajectories": trajectories,
            "group_rewards": group.group_rewards if group else [],
            "group_metrics": group.group_metrics if group else [],
            "total_rewards": group.total_rewards() if group else [],
            **({"collected": self.collected} if self.collected else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GroupRecord:
        version = data.get("format", FORMAT_VERSION)
        if version not in READABLE_FORMATS:
            expected = " or ".join(str(v) for v in READABLE_FORMATS)
            raise ValueError(f"unsupported trajectory format {version} (expected {expected})")
        group = None
        refs: dict[int, PrefixRef] = {}
        if data.get("status", "ok") == "ok":
            metrics: list[Metrics] = [dict(m) for m in data.get("group_metrics", [])]
            whole, refs = restore_leaves(data["trajectories"])
            group = TrajectoryGroup(
                trajectories=[_trajectory_of(data, t, item) for t, item in enumerate(whole)],
                group_rewards=[float(r) for r in data["group_rewards"]],
                group_metrics=metrics,
                tags=list(data.get("tags", [])),
            )
        return cls(
            key=data["key"],
            env=data["env"],
            task_id=data["task_id"],
            group=group,
            status=data.get("status", "ok"),
            error=data.get("error"),
            attempts=int(data.get("attempts", 1)),
            traceback=data.get("traceback"),
            env_config=dict(data.get("env_config", {})),
            provenance=dict(data.get("provenance", {})),
            extra=dict(data.get("extra", {})),
            created=float(data.get("created", 0.0)),
            run=dict(data.get("run") or {}),
            stored_prefixes=refs,
            collected=dict(data.get("collected") or {}),
            stored_total_rewards=data.get("total_rewards"),
        )
