"""What produced a group of trajectories, recorded with it.

People moving an experiment between trainers need to know, from the data alone,
which tokenizer and template rendered the context, which weights sampled the
response, and under which settings. This module builds that record; the collector
stores it with every group and the hand-offs carry it in their metadata.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.tokenizer_fingerprint import tokenizer_fingerprint


@dataclass
class SamplingSettings:
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None


@dataclass
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


def build_provenance(
    *,
    tokenizer: Any,
    env_name: str,
    env_config: EnvConfig | None = None,
    policy: PolicyIdentity,
    sampling: SamplingSettings | None = None,
    stop_conditions: list[str] | None = None,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "env": {"name": env_name},
        "policy": asdict(policy),
        "sampling": asdict(sampling or SamplingSettings()),
    }
    if env_config is not None:
        from agentenvs.envs.data_hashes import data_digests

        record["env"].update(
            {
                "data": data_digests(env_config.data_sources()),  # content hashes, not paths
                "version": type(env_config).version,
                "config_sha256": env_config.config_hash(),
                "config": env_config.model_dump(mode="json"),
                "renderer": env_config.renderer_kind,
                "protocol": getattr(env_config, "protocol", None),
                # The parser that reads the model's tool calls, where the env lets one be
                # chosen (ors, harbor); what each group's calls were read as is in
                # its record's ``tool_calls`` (rollout/collect/provenance.py).
                "tool_format": _plain(getattr(env_config, "tool_format", None)),
            }
        )
    if stop_conditions is not None:
        record["stop_conditions"] = list(stop_conditions)
    return record


def _plain(value: Any) -> str | None:
    return None if value is None else str(value)
