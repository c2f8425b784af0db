"""A run, described once: :class:`RunSpec`, what :func:`agentenvs.rollout.run` runs.

Every setting of a run lives in one frozen value, made once by the command line
(``agentenvs rollout``, ``agentenvs eval``) or by Python, and read by whatever runs
it: which environment and config, which tasks, which policy with which sampling
settings and tokenizer, the collection's limits, where episodes run, where the
groups are stored, tree branching, and what the run adds to every record's
provenance. Nothing is threaded through rows of keyword arguments, so a new
setting is one field here and one flag in ``rollout/cli/options.py``.

>>> spec = RunSpec(EnvSpec("guess_number", {"limits": {"max_turns": 8}}),
...                DatasetSpec(groups=8, group_size=4), store=StoreSpec("out/g.jsonl"))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenvs.rollout.collect.executors.spec import PolicySpec
from agentenvs.rollout.collect.options import CollectOptions, check_at_least
from agentenvs.rollout.collect.provenance import ProvenanceNotes
from agentenvs.rollout.collect.tree import BranchSchedule
from agentenvs.rollout.data.provenance import SamplingSettings

__all__ = [
    "CollectOptions",
    "DatasetSpec",
    "EnvSpec",
    "ExecutorSpec",
    "PolicySpec",
    "RunSpec",
    "SamplingSettings",
    "StoreSpec",
]


@dataclass(frozen=True)
class EnvSpec:
    """The environment: a registered name, config values laid over its defaults
    (nested as the config nests them: ``{"limits": {"max_turns": 8}}``), and, to run
    it on ``agentenvs serve`` servers instead of in this process, their URLs."""

    name: str
    config: Mapping[str, Any] = field(default_factory=dict)
    servers: tuple[str, ...] = ()
    server_token: str | None = None
    """Bearer token of the env servers."""


@dataclass(frozen=True)
class DatasetSpec:
    """Which tasks: ``groups`` groups of ``group_size`` episodes over the split's tasks
    in order (wrapping around when there are more groups than tasks)."""

    split: str = "train"
    groups: int = 4
    group_size: int = 2

    def __post_init__(self) -> None:
        check_at_least("groups", self.groups, 1)
        check_at_least("group_size", self.group_size, 1)


@dataclass(frozen=True)
class ExecutorSpec:
    """Where episodes run: ``in-process``, or ``ray`` (a local Ray for the run, or the
    cluster at ``ray_address``: ``auto`` or ``HOST:PORT``)."""

    kind: str = "in-process"
    ray_address: str | None = None


@dataclass(frozen=True)
class StoreSpec:
    """Where the groups go: a trajectory JSONL (reruns resume; None: not stored), and
    the key of each group (default ``"<position>:<task id>"``)."""

    path: Path | str | None = None
    keys: tuple[str, ...] | None = None


SAMPLING_KEYS = frozenset(SamplingSettings.__dataclass_fields__)


@dataclass(frozen=True)
class RunSpec:
    """One run, described (see the module docstring). Made with the defaults of
    ``agentenvs rollout`` for everything not given."""

    env: EnvSpec
    dataset: DatasetSpec = field(default_factory=DatasetSpec)
    policy: PolicySpec = field(default_factory=lambda: PolicySpec("scripted"))
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    """Laid over the policy's options (a setting given in both is refused)."""
    tokenizer: str | None = None
    """``builtin`` or a local Hugging Face tokenizer directory; None: the ``hf``
    policy's model directory, else ``builtin``."""
    limits: CollectOptions = field(default_factory=CollectOptions)
    executor: ExecutorSpec = field(default_factory=ExecutorSpec)
    store: StoreSpec = field(default_factory=StoreSpec)
    tree: BranchSchedule | None = None
    """Tree rollouts: where episodes branch (None: independent episodes)."""
    provenance: Mapping[str, Any] = field(default_factory=dict)
    """Extra sections of every record's provenance (``agentenvs eval``'s ``eval``)."""

    def __post_init__(self) -> None:
        both = sorted(SAMPLING_KEYS & set(self.policy.options) & set(self.sampling.as_options()))
        if both:
            raise ValueError(f"{', '.join(both)}: set in sampling and in the policy's options")

    def policy_options(self) -> dict[str, Any]:
        """The options the policy is made with: its own, with the sampling settings."""
        return {**self.policy.options, **self.sampling.as_options()}

    def tokenizer_spec(self) -> str:
        """The tokenizer to render with: the one named; else a local ``hf`` model's own;
        else ``builtin``."""
        return self.tokenizer or self.policy.own_tokenizer() or "builtin"

    def provenance_notes(self) -> ProvenanceNotes:
        """What this spec adds to the provenance the collector records."""
        return ProvenanceNotes(
            tokenizer_spec=self.tokenizer_spec(),
            policy_name=self.policy.name,
            policy_options=self.policy_options(),
            sections=dict(self.provenance),
        )
