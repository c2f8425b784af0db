"""A group's provenance: what made it, built by the collector for every store.

Three sources, and nothing else: the group's builder (:meth:`EnvGroupBuilder.describe
<agentenvs.envs.types.EnvGroupBuilder.describe>`: env name, version, config,
renderer, protocol, tool-call parser, content hashes of its data, tokenizer), the policy's self-description (model, sampling
settings, weights, asked when the group finishes), and what a run spec adds
(:class:`ProvenanceNotes`: how to reload the tokenizer, the policy as it was asked
for, extra sections such as ``agentenvs eval``'s panel). ``collect()`` from Python
and ``agentenvs rollout`` therefore write the same provenance.

Kept apart from the collector because the Ray actor that describes its own policy
asks it too, and should not have to import the whole collection loop for it.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.tokenizer_fingerprint import tokenizer_fingerprint
from agentenvs.envs.types import GroupDescription, TrajectoryGroup
from agentenvs.rollout.data.provenance import PolicyIdentity, SamplingSettings, build_provenance
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
    """A finished group's provenance: ``provenance`` (:meth:`RunProvenance.base`),
    with the policy's live fields.

    The ``policy`` section keeps its shape, but its model and weights fields are
    refreshed from the policy as it is now, so a model discovered from the server
    is not recorded as null.
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


@dataclass(frozen=True)
class ProvenanceNotes:
    """What a run spec adds to the provenance the collector builds itself.

    Everything here is optional: without it the tokenizer's reload spec is its own
    name (``builtin`` for the shipped tokenizer), the policy's kind is the name it
    gives itself and its options are its self-description."""

    tokenizer_spec: str | None = None
    """How to load the tokenizer again (``builtin``, a directory): what ``view`` uses."""
    policy_name: str | None = None
    """The policy's registry name as asked for (``make_policy(NAME)``)."""
    policy_options: Mapping[str, Any] = field(default_factory=dict)
    """The options it was made with (plain values are recorded)."""
    sections: Mapping[str, Any] = field(default_factory=dict)
    """Extra top-level sections (``agentenvs eval`` records its panel under ``eval``)."""


def tokenizer_reload_spec(fingerprint: Mapping[str, Any]) -> str | None:
    """How to load a fingerprinted tokenizer again when nobody said: ``builtin`` for
    the shipped tokenizer (its name is not loadable), else its name (a Hugging Face
    tokenizer's ``name_or_path``: the directory or Hub id it was loaded from)."""
    from agentenvs.rollout.builtin_tokenizer import BUILTIN_NAME

    name = fingerprint.get("name")
    if name == BUILTIN_NAME:
        return "builtin"
    return str(name) if name else None


class RunProvenance:
    """The base provenance of each group of one collection (before the live policy
    fields of :func:`record_provenance`), built from its description, the policy's
    self-description and the :class:`ProvenanceNotes`.

    A tokenizer's fingerprint is computed once per process (:func:`fingerprint_of`)."""

    def __init__(self, policy: object, notes: ProvenanceNotes | None = None) -> None:
        self.notes = notes or ProvenanceNotes()
        described = policy_provenance(policy)
        self.policy = PolicyIdentity.described(
            described, kind=self.notes.policy_name, options=self.notes.policy_options
        )
        self.sampling = SamplingSettings.described(described)

    def base(self, description: GroupDescription) -> dict[str, Any]:
        record = build_provenance(
            tokenizer=self.tokenizer_section(description.tokenizer),
            env=description,
            policy=self.policy,
            sampling=self.sampling,
        )
        record.update(self.notes.sections)
        return record

    def tokenizer_section(self, tokenizer: Any) -> dict[str, Any] | None:
        """The tokenizer's fingerprint and reload spec; None when nothing is known."""
        spec = self.notes.tokenizer_spec
        if tokenizer is None:
            return {"spec": spec} if spec else None
        fingerprint = fingerprint_of(tokenizer)
        return {**fingerprint, "spec": spec or tokenizer_reload_spec(fingerprint)}


_FINGERPRINTS: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def fingerprint_of(tokenizer: Any) -> dict[str, Any]:
    """:func:`tokenizer_fingerprint`, memoised per tokenizer object: hashing a large
    vocabulary takes a noticeable fraction of a second, and loops call ``collect`` often."""
    with contextlib.suppress(KeyError, TypeError):
        return dict(_FINGERPRINTS[tokenizer])
    fingerprint = tokenizer_fingerprint(tokenizer)
    with contextlib.suppress(TypeError):  # not weak-referenceable: hash again next time
        _FINGERPRINTS[tokenizer] = fingerprint
    return dict(fingerprint)
