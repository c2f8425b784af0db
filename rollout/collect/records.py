"""The stored form of a finished group: one JSON line per group.

This is the contract between the collector (writes), the store (resume), the
viewer, ``agentenvs check`` and every hand-off (read). Observations are stored
delta-encoded: a transition whose observation extends the previous context
(observation + action) stores only the new tokens, so a long multi-turn episode
costs linear, not quadratic, space.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from agentenvs.envs.types import (
    Metrics,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
)

FORMAT_VERSION = 1


def trajectory_to_json(traj: Trajectory) -> dict[str, Any]:
    transitions = []
    context: list[int] = []
    for tr in traj.transitions:
        n = len(context)
        if n and len(tr.ob) >= n and tr.ob[:n] == context:
            prefix, new = n, tr.ob[n:]
        else:
            prefix, new = 0, tr.ob
        transitions.append(
            {
                "ob_prefix": prefix,
                "ob_new": list(new),
                "ac": list(tr.ac.tokens),
                "logprobs": None if tr.ac.logprobs is None else list(tr.ac.logprobs),
                "sampler_stop": tr.ac.stop_reason,
                "reward": tr.reward,
                "done": tr.episode_done,
                "metrics": dict(tr.metrics),
                "logs": dict(tr.logs),
            }
        )
        context = list(tr.ob) + list(tr.ac.tokens)
    return {
        "transitions": transitions,
        "final_ob": list(traj.final_ob),
        "stop_reason": traj.stop_reason,
    }


def trajectory_from_json(data: dict[str, Any]) -> Trajectory:
    transitions = []
    context: list[int] = []
    for item in data["transitions"]:
        prefix = int(item["ob_prefix"])
        if prefix > len(context):
            raise ValueError(f"ob_prefix {prefix} is longer than the context ({len(context)})")
        ob = context[:prefix] + list(item["ob_new"])
        ac = TokensWithLogprobs(list(item["ac"]), item.get("logprobs"), item["sampler_stop"])
        transitions.append(
            Transition(
                ob=ob,
                ac=ac,
                reward=float(item["reward"]),
                episode_done=bool(item["done"]),
                metrics=dict(item.get("metrics", {})),
                logs=dict(item.get("logs", {})),
            )
        )
        context = ob + ac.tokens
    return Trajectory(transitions, list(data.get("final_ob", [])), data.get("stop_reason"))


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
    env_config: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    """Tokenizer, renderer, sampling settings, policy identity and weights version."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Derived data attached later (advantages and their estimator, for instance)."""
    created: float = field(default_factory=time.time)
    run: dict[str, Any] = field(default_factory=dict)
    """The run's identity (:class:`~agentenvs.rollout.collect.run_identity.RunIdentity`
    as JSON): what a resume compares before appending to this store."""

    def to_json(self) -> dict[str, Any]:
        group = self.group
        return {
            "format": FORMAT_VERSION,
            "key": self.key,
            "env": self.env,
            "task_id": self.task_id,
            "status": self.status,
            "error": self.error,
            "attempts": self.attempts,
            "env_config": self.env_config,
            "provenance": self.provenance,
            "extra": self.extra,
            "created": self.created,
            "run": self.run,
            "tags": group.tags if group else [],
            "trajectories": [trajectory_to_json(t) for t in group.trajectories] if group else [],
            "group_rewards": group.group_rewards if group else [],
            "group_metrics": group.group_metrics if group else [],
            "total_rewards": group.total_rewards() if group else [],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GroupRecord:
        version = data.get("format", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise ValueError(f"unsupported trajectory format {version} (expected {FORMAT_VERSION})")
        group = None
        if data.get("status", "ok") == "ok":
            metrics: list[Metrics] = [dict(m) for m in data.get("group_metrics", [])]
            group = TrajectoryGroup(
                trajectories=[trajectory_from_json(t) for t in data["trajectories"]],
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
            env_config=dict(data.get("env_config", {})),
            provenance=dict(data.get("provenance", {})),
            extra=dict(data.get("extra", {})),
            created=float(data.get("created", 0.0)),
            run=dict(data.get("run") or {}),
        )
