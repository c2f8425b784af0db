"""What produced a group of trajectories, recorded with it.

People moving an experiment between trainers need to know, from the data alone,
which tokenizer and template rendered the context, which weights sampled the
response, and under which settings. This module is that record's shape; the
collector builds one for every group from what the group's builder describes, what
the policy says of itself and what the run spec adds
(:mod:`agentenvs.rollout.collect.provenance`), so a store written from Python says
as much as one written by ``agentenvs rollout``. The hand-offs carry it in their
metadata.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from agentenvs.envs.config import dumped_config_hash
from agentenvs.envs.types import GroupDescription

SAMPLING_FIELDS = ("temperature", "top_p", "max_tokens", "seed")
"""The sampling settings a policy's self-description and a run spec may name."""


@dataclass(frozen=True)
class SamplingSettings:
    """How a policy samples; ``None``: the policy's (or the env's) default."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None

    @classmethod
    def described(cls, described: Mapping[str, Any]) -> SamplingSettings:
        """The settings a policy's self-description names."""
        return cls(**{name: described.get(name) for name in SAMPLING_FIELDS})

    def as_options(self) -> dict[str, Any]:
        """The settings that are set, as policy options (``make_policy`` keywords)."""
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class PolicyIdentity:
    """Which weights produced the samples.

    ``weights_version`` is set by the caller and bumped after each optimizer step,
    so a trainer can refuse samples that are too stale.
    """

    kind: str
    model: str | None = None
    url: str | None = None
    weights_version: int | str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def described(
        cls,
        described: Mapping[str, Any],
        *,
        kind: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> PolicyIdentity:
        """From a policy's self-description (``provenance()``), with the ``kind`` and
        ``options`` it was asked for when known (a run spec's policy name and options;
        only plain values are kept)."""
        plain = {
            k: v
            for k, v in (options or {}).items()
            if isinstance(v, str | int | float | bool | None)
        }
        return cls(
            kind=kind or str(described.get("policy") or "unknown"),
            model=_str_or_none(described.get("model")),
            url=_str_or_none(described.get("url")),
            weights_version=described.get("weights_version"),
            options={**plain, **{k: v for k, v in described.items() if k != "policy"}},
        )


def env_provenance(description: GroupDescription) -> dict[str, Any]:
    """The ``env`` section: name, version, config and its hash, renderer, protocol,
    tool-call parser and the content hashes of its data, as the group's builder
    describes them (a path is never recorded, only what the file held:
    :mod:`agentenvs.envs.data_hashes`)."""
    config = dict(description.config)
    return {
        "name": description.env_name,
        "version": description.env_version,
        "config_sha256": dumped_config_hash(config) if config else None,
        "config": config,
        "renderer": description.renderer,
        "protocol": description.protocol,
        # The parser that reads the model's tool calls, where the env lets one be chosen
        # (ors, harbor, harness); what each group's calls were read as is in its record's
        # ``tool_calls`` (rollout/collect/provenance.py).
        "tool_format": description.tool_format,
        "data": dict(description.data),
    }


def build_provenance(
    *,
    tokenizer: Mapping[str, Any] | None,
    env: GroupDescription,
    policy: PolicyIdentity,
    sampling: SamplingSettings | None = None,
    stop_conditions: list[str] | None = None,
) -> dict[str, Any]:
    """One group's provenance. ``tokenizer`` is its fingerprint and how to reload it
    (:meth:`agentenvs.rollout.collect.provenance.RunProvenance.tokenizer_section`); a group whose
    tokenizer is not known records none, and readers ask for one."""
    record: dict[str, Any] = {
        "env": env_provenance(env),
        "policy": asdict(policy),
        "sampling": asdict(sampling or SamplingSettings()),
    }
    if tokenizer is not None:
        record = {"tokenizer": dict(tokenizer), **record}
    if stop_conditions is not None:
        record["stop_conditions"] = list(stop_conditions)
    return record


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)
