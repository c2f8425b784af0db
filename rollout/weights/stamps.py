"""Per-turn weight stamps -> the group-level version staleness is judged by.

A policy stamps each turn with the version that served it (``policy/weights_version``
in the transition's logs). When a sync lands mid-episode, one group holds turns
from two versions; its recorded ``weights_version`` is then the *oldest* of them,
because staleness must be judged by the oldest weights that produced any of its
tokens, and the full set is kept next to it.
"""

from __future__ import annotations

from typing import Any

from agentenvs.envs.types import TrajectoryGroup

VERSION_LOG = "policy/weights_version"


def turn_versions(group: TrajectoryGroup) -> list[Any]:
    """The stamped version of every turn that has one, in trajectory order."""
    return [
        tr.logs[VERSION_LOG]
        for traj in group.trajectories
        for tr in traj.transitions
        if VERSION_LOG in tr.logs
    ]


def with_turn_versions(described: dict[str, Any], group: TrajectoryGroup | None) -> dict[str, Any]:
    """A policy's provenance with ``weights_version`` set from its turns' stamps.

    Unchanged when no turn is stamped (policies that do not stamp). Versions that
    are not all numbers cannot be ordered; the first one is kept then.
    """
    versions = turn_versions(group) if group is not None else []
    if not versions:
        return described
    distinct = sorted(set(versions), key=_order)
    described = dict(described)
    described["weights_version"] = distinct[0]
    if len(distinct) > 1:
        described["weights_versions"] = distinct
    return described


def _order(version: Any) -> tuple[int, Any]:
    return (0, version) if isinstance(version, int | float) else (1, str(version))
