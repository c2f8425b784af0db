"""What a run ran with, sorted into the settings ``compare`` checks one by one.

Each setting has a name a user can accept with ``--allow``: ``env``, ``split``,
``panel``, ``config``, ``budget``, ``sampling``, ``renderer``, ``template``,
``tokenizer``, ``group_size``, ``policy``, ``weights`` (and ``provenance`` for a
file that records none). The env config is split three ways, so a difference is
named by what it means: the episode budget (``limits``, any ``*timeout*`` key, the
sampler's own token cap), the renderer and protocol, and the rest of the config.

Sampling seeds are left out on purpose (as in the run identity): two seeds of one
policy are two samples of the same experiment, which is what a comparison wants.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.compare.runs import WeightsFacts, mapping_or_empty

SETTING_NAMES = (
    "env",
    "split",
    "panel",
    "config",
    "budget",
    "sampling",
    "renderer",
    "tool_parser",
    "template",
    "tokenizer",
    "group_size",
    "policy",
    "weights",
    "provenance",
)
"""Every name ``--allow`` accepts, in the order differences are listed."""

_RENDERING_KEYS = ("renderer", "protocol")


def run_settings(records: Sequence[GroupRecord]) -> dict[str, Any]:
    """The comparability facts of one run's records (``None`` where nothing was recorded)."""
    record = records[-1]
    run = record.run
    provenance = record.provenance
    env = mapping_or_empty(provenance.get("env"))
    tokenizer = mapping_or_empty(provenance.get("tokenizer"))
    policy = mapping_or_empty(provenance.get("policy"))
    sampling = _sampling(provenance, policy)
    config = dict(record.env_config or env.get("config") or {})
    limits = mapping_or_empty(config.pop("limits", None))
    rendering = {key: config.pop(key, None) for key in _RENDERING_KEYS}
    if env.get("renderer") is not None:  # the resolved kind, not the env's unset default
        rendering["renderer"] = env["renderer"]
    if env.get("protocol") is not None:
        rendering["protocol"] = env["protocol"]
    tool_parser = _tool_parser(records, env, config.pop("tool_format", None))
    timeouts = _pop_timeouts(config)
    budget = {**{str(k): v for k, v in limits.items()}, **timeouts}
    budget["sampler max_tokens"] = sampling.pop("max_tokens", None)
    vocab, template = _tokenizer_hashes(tokenizer, run)
    sizes = {len(r.group.trajectories) for r in records if r.group is not None}
    group_size = run.get("group_size")
    if group_size is None and len(sizes) == 1:
        group_size = sizes.pop()
    return {
        "env": _env_name(record, env),
        "split": run.get("split"),
        "config": config,
        "config_sha256": env.get("config_sha256") or run.get("config_sha256"),
        "budget": budget,
        "sampling": {k: sampling.get(k) for k in ("temperature", "top_p")},
        "seed": sampling.get("seed"),
        "renderer": rendering,
        "tool_parser": tool_parser,
        "template": template,
        "tokenizer": vocab,
        "group_size": group_size,
        "policy": {
            "kind": policy.get("kind") or policy.get("policy"),
            "variant": mapping_or_empty(policy.get("options")).get("variant")
            or policy.get("variant"),
        },
    }


def _tool_parser(
    records: Sequence[GroupRecord], env: Mapping[str, Any], configured: Any
) -> dict[str, Any]:
    """The parser chosen for tool calls (``env.tool_format``) and, over the run's groups,
    the formats declared and the formats calls were read as (``provenance.tool_calls``)."""
    declared: set[str] = set()
    read_as: set[str] = set()
    for record in records:
        calls = mapping_or_empty(record.provenance.get("tool_calls"))
        declared.update(calls.get("declared") or [])
        read_as.update(calls.get("read_as") or [])
    chosen = env.get("tool_format") or configured
    return {
        "format": None if chosen is None else str(chosen),
        "declared": sorted(declared) or None,
        "read_as": sorted(read_as) or None,
    }


def _env_name(record: GroupRecord, env: Mapping[str, Any]) -> str:
    name = str(env.get("name") or record.env)
    return f"{name} v{env['version']}" if env.get("version") is not None else name


def _sampling(provenance: Mapping[str, Any], policy: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling settings: the CLI's ``sampling`` section, else the policy's own words
    (a loop that called ``collect`` without CLI provenance records only those)."""
    given = dict(mapping_or_empty(provenance.get("sampling")))
    for key in ("temperature", "top_p", "max_tokens", "seed"):
        if given.get(key) is None and policy.get(key) is not None:
            given[key] = policy[key]
    return given


def _pop_timeouts(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Remove every ``*timeout*`` key (nested ones too) from ``config``; return them flat."""
    found: dict[str, Any] = {}
    for key in list(config):
        value = config[key]
        if "timeout" in str(key).lower():
            found[prefix + str(key)] = config.pop(key)
        elif isinstance(value, dict):
            inner = dict(value)
            found.update(_pop_timeouts(inner, f"{prefix}{key}."))
            config[key] = inner
    return found


def _tokenizer_hashes(
    tokenizer: Mapping[str, Any], run: Mapping[str, Any]
) -> tuple[str | None, str | None]:
    """Vocabulary and chat-template hashes: from the provenance, else from the run
    identity's ``"vocab X, template Y"``."""
    vocab, template = tokenizer.get("vocab_sha256"), tokenizer.get("chat_template_sha256")
    if vocab is None and isinstance(run.get("tokenizer"), str):
        for part in str(run["tokenizer"]).split(", "):
            kind, _, value = part.partition(" ")
            if kind == "vocab":
                vocab = value
            elif kind == "template":
                template = value
    return vocab, template


def run_weights(records: Sequence[GroupRecord]) -> list[WeightsFacts]:
    """The distinct weights a run's records say sampled them, in first-seen order.

    Best first: a served identity (``provenance.policy.weights``, with its hash), what
    ``agentenvs eval`` hashed of a local model (``provenance.eval.weights``), else the
    policy's model name and declared version (no hash: sameness cannot be proven)."""
    found: dict[WeightsFacts, None] = {}
    for record in records:
        policy = mapping_or_empty(record.provenance.get("policy"))
        served = mapping_or_empty(policy.get("weights"))
        evaluated = mapping_or_empty(mapping_or_empty(record.provenance.get("eval")).get("weights"))
        version = policy.get("weights_version")
        if served.get("sha256") or served.get("name"):
            facts = WeightsFacts(
                served.get("name") or served.get("source"),
                served.get("sha256"),
                served.get("version", version),
                served.get("path"),
            )
        elif evaluated:
            facts = WeightsFacts(
                evaluated.get("name"), evaluated.get("sha256"), version, evaluated.get("path")
            )
        elif policy.get("model") is not None or version is not None:
            facts = WeightsFacts(_str(policy.get("model")), None, version)
        else:
            continue
        found[facts] = None
    return list(found)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)
