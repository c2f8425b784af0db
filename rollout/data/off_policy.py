"""The declared off-policy rule of a run: what happens to tokens sampled by older weights.

With partial rollouts and streaming collection a trained batch holds tokens sampled
by several weights versions (:mod:`agentenvs.rollout.weights.token_versions`). A run
declares once how its loss treats them, and every hand-off states it:

* ``mask``: a token sampled more than ``max_staleness`` versions before the version
  being trained gets loss mask 0 (and advantage 0; its behaviour logprob stays);
  the rest are trained as on-policy;
* ``importance``: every token is kept, with the behaviour logprobs the sampler gave,
  for an importance-weighted loss (decoupled PPO, truncated importance sampling:
  the trainer reweights by its own logprob minus the behaviour one). Tokens without
  behaviour logprobs cannot be reweighted and break the rule.

``agentenvs check`` fails a trained token outside the rule
(:func:`rule_violations`). Versions that are not numbers cannot be compared; such
tokens break a ``mask`` rule unless the version equals the trained one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentenvs.rollout.data.samples import TrainingSample
from agentenvs.rollout.weights.token_versions import Version

OffPolicyMode = Literal["mask", "importance"]

RULE_KEY = "off_policy"
"""Where a hand-off's metadata (and a run's notes) keep the rule."""


@dataclass(frozen=True)
class OffPolicyRule:
    mode: OffPolicyMode = "mask"
    max_staleness: int = 0
    """``mask``: how many versions behind the trained one a token may be and still be
    trained (0: only the trained version's own tokens)."""

    def __post_init__(self) -> None:
        if self.mode not in ("mask", "importance"):
            raise ValueError(f"off-policy mode must be 'mask' or 'importance', got {self.mode!r}")
        if not isinstance(self.max_staleness, int) or self.max_staleness < 0:
            raise ValueError(f"max_staleness must be a count >= 0, got {self.max_staleness!r}")

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "max_staleness": self.max_staleness}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OffPolicyRule:
        return cls(str(data.get("mode", "mask")), int(data.get("max_staleness", 0)))  # type: ignore[arg-type]

    def section(self) -> dict[str, Any]:
        """The run's provenance section that declares it:
        ``collect(..., notes=ProvenanceNotes(sections=rule.section()))``."""
        return {RULE_KEY: self.to_json()}

    def handoff_extra(self, trained: Version) -> dict[str, Any]:
        """What a hand-off's ``extra`` states: the rule and the version being trained
        (``agentenvs check`` judges every trained token by them)."""
        return {RULE_KEY: {**self.to_json(), "trained_version": trained}}

    @classmethod
    def of_provenance(cls, provenance: Mapping[str, Any]) -> OffPolicyRule | None:
        """The rule a run declared in its provenance, if it declared one."""
        declared = provenance.get(RULE_KEY)
        return cls.from_json(declared) if isinstance(declared, Mapping) else None

    def allows(self, version: Version | None, trained: Version, has_logprobs: bool) -> bool:
        """Whether a token sampled by ``version`` may be trained at ``trained``."""
        if self.mode == "importance":
            return has_logprobs
        if version == trained:
            return True
        if isinstance(version, int) and isinstance(trained, int):
            return 0 <= trained - version <= self.max_staleness
        return False


def apply_rule(samples: Iterable[TrainingSample], rule: OffPolicyRule, trained: Version) -> int:
    """Mask, in place, every trained token the rule does not allow at version
    ``trained``; returns how many were masked. Samples without per-token versions
    (no stamped turn) are left alone: nothing says they are stale."""
    masked = 0
    for sample in samples:
        if not sample.token_versions:
            continue
        for i, version in enumerate(sample.token_versions):
            if sample.loss_mask[i] and not rule.allows(version, trained, sample.has_logprobs):
                sample.loss_mask[i] = 0
                sample.advantages[i] = 0.0
                masked += 1
    return masked


@dataclass(frozen=True)
class RuleViolation:
    sample: int
    """Index of the sample in the hand-off."""
    position: int
    version: Version | None


def rule_violations(
    samples: Iterable[TrainingSample], rule: OffPolicyRule, trained: Version
) -> list[RuleViolation]:
    """Every trained token the rule does not allow (the first per sample)."""
    found: list[RuleViolation] = []
    for index, sample in enumerate(samples):
        for i, version in enumerate(sample.token_versions):
            if sample.loss_mask[i] and not rule.allows(version, trained, sample.has_logprobs):
                found.append(RuleViolation(index, i, version))
                break
    return found
