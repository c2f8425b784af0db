"""Per-turn weight stamps -> which weights sampled a group, as one typed answer.

A policy stamps each turn with the version that served it (``policy/weights_version``
in the transition's logs) and, when it knows them, the weights' label
(``policy/weights``, :meth:`WeightsIdentity.label`). When a sync lands mid-episode,
one group holds turns from two versions; its recorded ``weights_version`` is then
the *oldest* of them, because staleness must be judged by the oldest weights that
produced any of its tokens, and the full set is kept next to it.

The stored form stays those log keys and the ``provenance["policy"]`` fields;
:class:`SampledBy` is how Python code reads them back (``GroupRecord.sampled_by()``
for a record, :meth:`SampledBy.of_trajectory` for one trajectory), so no reader
digs through the dicts itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.types import Trajectory, TrajectoryGroup, Transition
from agentenvs.envs.weights_identity import WeightsIdentity
from agentenvs.rollout.weights.token_versions import VERSION_LOG, Version, VersionRun, runs_of

__all__ = ["VERSION_LOG", "WEIGHTS_LOG", "SampledBy", "TurnStamp", "Version", "with_turn_versions"]

WEIGHTS_LOG = "policy/weights"
"""The per-turn log key of the served weights' label (``lora:name@hash``)."""


@dataclass(frozen=True)
class TurnStamp:
    """The weights one turn was sampled with, as its policy stamped it."""

    traj_index: int
    turn: int
    version: Version
    label: str | None = None
    """:meth:`WeightsIdentity.label` of the weights, when the policy knows them."""
    runs: tuple[VersionRun, ...] = ()
    """The action's version runs when a sync landed while it was sampled (its
    tokens span several versions, :mod:`.token_versions`); empty otherwise."""

    @property
    def versions(self) -> tuple[Version, ...]:
        """Every version that sampled a token of this turn, in order."""
        return tuple(r.version for r in self.runs if r.version is not None) or (self.version,)


@dataclass(frozen=True)
class SampledBy:
    """Which weights, which version sampled a group (or one trajectory)."""

    version: Version | None
    """The version staleness is judged by: the oldest that sampled any turn, or for
    a policy that does not stamp turns the version it declared (None: unknown)."""
    versions: tuple[Version, ...] = ()
    """Every distinct version the turns were stamped with, oldest first; more than
    one when a sync landed mid-group, none when no turn is stamped."""
    turns: tuple[TurnStamp, ...] = ()
    """The stamp of every stamped turn, in trajectory order."""
    weights: WeightsIdentity | None = field(default=None, compare=False)
    """The full identity of :attr:`version`, the one the record claims (a policy
    that lists the identities it held finds it even when a sync landed mid-group);
    None if the policy has none or no longer knows it."""

    @property
    def oldest(self) -> TurnStamp | None:
        """The first turn stamped with :attr:`version` (what staleness is judged by)."""
        return next((t for t in self.turns if t.version == self.version), None)

    @property
    def label(self) -> str | None:
        """The label of the weights that sampled the oldest stamped turn."""
        oldest = self.oldest
        return oldest.label if oldest is not None else None

    @classmethod
    def of_trajectories(
        cls, trajectories: Iterable[Trajectory], policy: Mapping[str, Any] | None = None
    ) -> SampledBy:
        """From the turns' stamps, and a record's ``provenance["policy"]`` section
        when there is one (its ``weights_version`` is the one recorded, kept as is)."""
        turns = tuple(
            TurnStamp(t, n, tr.logs[VERSION_LOG], tr.logs.get(WEIGHTS_LOG), _several(tr))
            for t, traj in enumerate(trajectories)
            for n, tr in enumerate(traj.transitions)
            if VERSION_LOG in tr.logs
        )
        versions = _distinct(v for t in turns for v in t.versions)
        if policy is None:
            return cls(versions[0] if versions else None, versions, turns)
        weights = policy.get("weights")
        return cls(
            policy.get("weights_version"),
            versions,
            turns,
            WeightsIdentity.from_json(weights) if isinstance(weights, Mapping) else None,
        )

    @classmethod
    def of_group(
        cls, group: TrajectoryGroup | None, policy: Mapping[str, Any] | None = None
    ) -> SampledBy:
        return cls.of_trajectories(group.trajectories if group is not None else (), policy)

    @classmethod
    def of_trajectory(cls, traj: Trajectory) -> SampledBy:
        """One trajectory's own answer, from its stamps alone (a trainer's batch row)."""
        return cls.of_trajectories([traj])


def with_turn_versions(described: dict[str, Any], group: TrajectoryGroup | None) -> dict[str, Any]:
    """A policy's provenance with ``weights_version`` set from its turns' stamps.

    The ``weights`` identity is the one of that version (the oldest stamped), so
    the record describes the version it claims; a policy that lists the
    identities it held recently (``weights_seen``) lets it be found, and the
    newest stamped one is kept as ``weights_newest`` when a sync landed mid-group.
    ``weights_seen`` itself is not recorded. Unchanged otherwise when no turn is
    stamped (policies that do not stamp). Versions that are not all numbers
    cannot be ordered; the first one is kept then.
    """
    described = dict(described)
    seen = described.pop("weights_seen", None) or []
    distinct = SampledBy.of_group(group).versions
    if not distinct:
        return described
    described["weights_version"] = distinct[0]
    by_version = {w.get("version"): w for w in seen if isinstance(w, Mapping)}
    if distinct[0] in by_version:
        described["weights"] = dict(by_version[distinct[0]])
    elif (
        isinstance(described.get("weights"), Mapping)
        and described["weights"].get("version") != distinct[0]
    ):
        # The policy's identity is of a newer version, and the claimed one's is not
        # known any more: no identity rather than a wrong one.
        described["weights_newest"] = described.pop("weights")
    if len(distinct) > 1:
        described["weights_versions"] = list(distinct)
        if distinct[-1] in by_version:
            described["weights_newest"] = dict(by_version[distinct[-1]])
    return described


def _several(transition: Transition) -> tuple[VersionRun, ...]:
    """The runs of a turn whose tokens span several versions; () otherwise, or when
    its runs entry is malformed (``agentenvs check`` reports that)."""
    try:
        runs = runs_of(transition)
    except ValueError:
        return ()
    return runs if len(runs) > 1 else ()


def _distinct(versions: Iterable[Version]) -> tuple[Version, ...]:
    return tuple(sorted(set(versions), key=_order))


def _order(version: Any) -> tuple[int, Any]:
    return (0, version) if isinstance(version, int | float) else (1, str(version))
