"""What produced a CLI run, recorded with every group: tokenizer (and how to reload it),
environment and config, policy identity and sampling settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentenvs.envs.config import EnvConfig


def run_provenance(
    *,
    tokenizer: Any,
    tokenizer_spec: str,
    env_name: str,
    config: EnvConfig,
    policy: Any,
    policy_name: str,
    policy_options: dict[str, Any],
) -> dict[str, Any]:
    """What produced the run: tokenizer, template, renderer, env and config, policy."""
    from agentenvs.rollout.collect.provenance import policy_provenance
    from agentenvs.rollout.data.provenance import PolicyIdentity, SamplingSettings, build_provenance

    described = policy_provenance(policy)
    plain_options = {
        k: v for k, v in policy_options.items() if isinstance(v, str | int | float | bool | None)
    }
    record = build_provenance(
        tokenizer=tokenizer,
        env_name=env_name,
        env_config=config,
        policy=PolicyIdentity(
            kind=policy_name,
            model=_str_or_none(described.get("model")),
            url=_str_or_none(described.get("url")),
            weights_version=described.get("weights_version"),
            options={**plain_options, **{k: v for k, v in described.items() if k != "policy"}},
        ),
        sampling=SamplingSettings(
            temperature=described.get("temperature"),
            top_p=described.get("top_p"),
            max_tokens=described.get("max_tokens"),
            seed=described.get("seed"),
        ),
    )
    record["tokenizer"]["spec"] = tokenizer_spec  # how `agentenvs view` reloads it
    return record


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)
