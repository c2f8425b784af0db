"""A finished group's provenance: what the policy says about itself, stamped on records.

Kept apart from the collector because three places ask it (the collector, the Ray
actor that describes its own policy, the CLI's run provenance) and none of them
should have to import the whole collection loop for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentenvs.envs.types import TrajectoryGroup
from agentenvs.rollout.policies.base import SelfDescribing, VersionedPolicy
from agentenvs.rollout.weights.stamps import with_turn_versions


def policy_provenance(policy: object, group: TrajectoryGroup | None = None) -> dict[str, Any]:
    """What a policy says about itself (model, sampling settings) for the records.

    Asked when a group finishes, not before the first request: a model name found
    on the server is known by then. With ``group``, the weights version is the
    oldest its turns were stamped with (a sync may land mid-collection)."""
    if isinstance(policy, ReportedProvenance):
        described = dict(policy.reported)
    elif isinstance(policy, SelfDescribing):
        described = dict(policy.provenance())
    else:
        described = {"policy": type(policy).__name__}
    if isinstance(policy, VersionedPolicy) and policy.weights_version is not None:
        described["weights_version"] = policy.weights_version
    return with_turn_versions(described, group)


@dataclass(frozen=True)
class ReportedProvenance:
    """A description a policy gave elsewhere and sent back: what a Ray actor's own
    copy of the policy reported, recorded as it was reported."""

    reported: dict[str, Any]


_LIVE_POLICY_FIELDS = (
    "model",
    "weights_version",
    "weights_versions",
    "weights",
    "weights_newest",
)
"""Known only once sampling has started (a model name found on the server, a sync)."""


def record_provenance(
    policy: object, group: TrajectoryGroup | None, provenance: dict | None
) -> dict[str, Any]:
    """A finished group's provenance: the caller's, with the policy's live fields.

    A caller's ``policy`` section (the CLI builds one before collecting) keeps its
    shape, but its model and weights fields are refreshed from the policy as it
    is now, so a model discovered from the server is not recorded as null.
    """
    live = policy_provenance(policy, group)
    record = {"policy": live, **(provenance or {})}
    parsed = tool_call_formats(group)
    if parsed is not None:
        record["tool_calls"] = parsed
    given = record["policy"]
    if given is not live and isinstance(given, dict):
        given = dict(given)
        given.update({k: live[k] for k in _LIVE_POLICY_FIELDS if live.get(k) is not None})
        if "weights" not in live:  # the claimed version's identity is not known
            given.pop("weights", None)
        record["policy"] = given
    return record


def tool_call_formats(group: TrajectoryGroup | None) -> dict[str, list[str]] | None:
    """Which tool-call formats the group's environment declared and which its calls were
    read as (from the steps' ``tool_calls`` logs), so ``compare`` can refuse two runs
    whose calls were parsed differently; None for a group without a tool protocol."""
    from agentenvs.envs.tool_calls.record import ToolCallLog

    if group is None:
        return None
    declared: set[str] = set()
    read_as: set[str] = set()
    seen = False
    for trajectory in group.trajectories:
        for transition in trajectory.transitions:
            try:
                log = ToolCallLog.from_logs(transition.logs)
            except ValueError:  # a corrupt log is check's to report, not provenance's
                continue
            if log is None:
                continue
            seen = True
            declared.update(str(f) for f in log.declared)
            read_as.update(str(a.format) for a in log.attempts)
    return {"declared": sorted(declared), "read_as": sorted(read_as)} if seen else None
