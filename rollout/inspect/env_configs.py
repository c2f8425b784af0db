"""The environment config a record was collected under, rebuilt once per distinct config.

Several checks ask what the environment declares (its limits and the reward rule of a
limit-ended episode, whether its episodes replay, its reward components): they ask
the config class the registry names, validated from the config the record stores.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from pydantic import ValidationError

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.registry import UnknownEnvError, config_class
from agentenvs.envs.rendered_env import Limits
from agentenvs.rollout.collect.records import GroupRecord


@functools.lru_cache(maxsize=32)
def _rebuilt(env: str, config_json: str) -> tuple[EnvConfig | None, str]:
    """(config, why not) for one stored config."""
    data = json.loads(config_json)
    try:
        cls = config_class(env)
    except (UnknownEnvError, ImportError) as error:
        return None, f"environment {env!r} is not installed here ({error})"
    try:
        return cls.model_validate(data), ""
    except ValidationError as error:
        return None, f"its stored config no longer validates ({error.error_count()} errors)"


def stored_config(record: GroupRecord) -> dict[str, Any]:
    """The env config the record stores (its own, else its provenance's)."""
    if record.env_config:
        return record.env_config
    config = (record.provenance.get("env") or {}).get("config")
    return config if isinstance(config, dict) else {}


def env_config(record: GroupRecord) -> tuple[EnvConfig | None, str]:
    """The record's environment config rebuilt, or None and why not."""
    return _rebuilt(record.env, json.dumps(stored_config(record), sort_keys=True))


def rule_config(record: GroupRecord) -> EnvConfig | None:
    """The record's config, or (for an environment not installed here) the base
    contract with the record's limits: what the shared limits' rules need. None when
    the record names no limits at all (a gateway capture: the harness, not our shared
    limits, decided what a cut-off reply meant), so no limit rule is assumed."""
    config, _ = env_config(record)
    if config is not None:
        return config
    if "limits" not in stored_config(record):
        return None
    try:
        limits = Limits.model_validate(stored_config(record).get("limits") or {})
    except ValidationError:
        limits = Limits()
    return EnvConfig(limits=limits)
