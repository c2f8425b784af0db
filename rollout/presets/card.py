"""Reproduction cards: what a preset's run must hold fixed, as hashes, and a check of a
store against it.

A card is computed from the live configuration (never stored with the code: the
environment halves keep changing, and a card is only worth what the code it hashes
says now). It holds:

* the preset's resolved environment config and its hash;
* the task panel: the exact task ids, in order, of the first ``count`` tasks of a split;
* the panel's first prompts as the policy sees them (token ids under the given
  tokenizer: this covers prompt strings, the task text and the chat template at once);
* the content hash of every data source the config reads (questions, corpus, index,
  problems, games: :meth:`~agentenvs.envs.config.EnvConfig.data_sources`);
* the sampling the original trained with (temperature, top_p) and its per-turn cap;
* the source of the prompt strings and of the reward function, hashed;
* the tokenizer (vocabulary and chat template) and renderer;
* the scripted oracle's reward band.

The card is made on this machine's data for the preset (its defaults, or the
``location`` given): keys that only say *where* data lives are not compared as config,
the content of what they point at is. :func:`check_store_against_card` fails a store that
drifted: another environment, another preset or changed knobs in any group, other data
(each source's hash in the store against the card's), other sampling (temperature,
top_p, a per-turn ``max_tokens`` below the original's cap), tasks out of the panel's
order, first prompts that differ from what the environment renders now, another chat
template, or (for a store the scripted oracle collected) rewards outside the oracle's
band.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
from array import array
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentenvs.envs.data_hashes import file_digest
from agentenvs.rollout.presets.registry import PresetEntry, preset

CARD_VERSION = 1
DEFAULT_PANEL = 8


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:16]


def digest_tokens(tokens: Sequence[int]) -> str:
    return _sha(array("q", list(tokens)).tobytes())


def _module_sha(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(f"module {module} not found")
    return file_digest(Path(spec.origin))


def _get(config: Mapping[str, Any], dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        config = config.setdefault(part, {})
    config[last] = value


def location_of(entry: PresetEntry, env_config: Mapping[str, Any]) -> dict[str, Any]:
    """The machine-specific keys of a stored config, nested, as ``make`` takes them."""
    found: dict[str, Any] = {}
    for key in entry.location_keys:
        value = _get(env_config, key)
        if value is not None:
            _set(found, key, value)
    return found


def without_locations(entry: PresetEntry, env_config: Mapping[str, Any]) -> dict[str, Any]:
    """A config with its location keys taken out: where data lives is this machine's
    business; the data's content hashes say whether it is the same data."""
    stripped = json.loads(json.dumps(env_config))
    for key in entry.location_keys:
        *parents, last = key.split(".")
        holder: Any = stripped
        for part in parents:
            holder = holder.get(part) if isinstance(holder, dict) else None
        if isinstance(holder, dict):
            holder.pop(last, None)
    return stripped


def card_sampling(entry: PresetEntry, config: Any) -> dict[str, Any]:
    """The original's sampling: temperature and top_p of its trainer half, and the
    per-turn cap (the environment's, else the episode budget each turn may use up)."""
    limits = config.limits
    return {
        "temperature": entry.half.value("temperature"),
        "top_p": entry.half.value("top_p"),
        "max_tokens_per_turn": limits.max_tokens_per_turn or limits.max_response_tokens,
    }


async def _first_prompts(config: Any, tokenizer: Any, split: str, count: int) -> list[str]:
    digests = []
    for index in range(count):
        env = config.make_env(index, tokenizer, split)
        try:
            ob, _ = await env.initial_observation()
            digests.append(digest_tokens(ob))
        finally:
            await env.close()
    return digests


def _strings_sha(dumped: Mapping[str, Any]) -> str:
    """Every user-settable prompt string of the config (and a strings file's bytes)."""
    keys = sorted(k for k in dumped if "prompt" in k or "template" in k or k.startswith("strings"))
    payload: dict[str, Any] = {k: dumped[k] for k in keys}
    strings_file = dumped.get("strings_file")
    if strings_file and Path(strings_file).expanduser().is_file():
        payload["strings_file_sha256"] = file_digest(Path(strings_file).expanduser())
    return _sha(json.dumps(payload, sort_keys=True, default=str))


def _shutdown(config: Any) -> None:
    """Stop what a config started for its envs (ALFWorld's engine workers)."""
    from agentenvs.envs.alfworld.config import ALFWorldConfig

    if isinstance(config, ALFWorldConfig):
        config.shutdown()


def compute_card(
    name: str,
    tokenizer: Any,
    *,
    split: str = "train",
    count: int = DEFAULT_PANEL,
    location: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The card of preset ``name`` as the code and data on this machine make it now."""
    from agentenvs.envs import make
    from agentenvs.envs.data_hashes import data_digests
    from agentenvs.envs.tokenizer_fingerprint import tokenizer_key

    entry = preset(name)
    config = make(entry.env, preset=name, **dict(location or {}))
    try:
        count = min(count, config.num_tasks(split))
        ids = [config.task_id(i, split) for i in range(count)]
        dumped = config.model_dump(mode="json")
        prompts = asyncio.run(_first_prompts(config, tokenizer, split, count))
        data = data_digests(config.data_sources())
    finally:
        _shutdown(config)
    return {
        "card_version": CARD_VERSION,
        "preset": name,
        "env": entry.env,
        "split": split,
        "config": dumped,
        "config_sha256": config.config_hash(),
        "task_panel": {"count": count, "ids": ids, "sha256": _sha("\n".join(ids))},
        "first_prompts": {"per_task": prompts, "sha256": _sha("".join(prompts))},
        "data": {"sources": data, "sha256": _sha(json.dumps(data, sort_keys=True))},
        "sampling": card_sampling(entry, config),
        "prompts": {
            "module": entry.prompts_module,
            "source_sha256": _module_sha(entry.prompts_module),
            "strings_sha256": _strings_sha(dumped),
        },
        "chat_template": {"renderer": config.renderer_kind, "tokenizer": tokenizer_key(tokenizer)},
        "reward": {
            "module": entry.reward_module,
            "source_sha256": _module_sha(entry.reward_module),
        },
        "oracle_band": list(entry.oracle_band),
    }


def _slot(key: str) -> int | None:
    """The group's place in its collection, from a default key (``"3:train/x"``)."""
    head, sep, _ = str(key).partition(":")
    return int(head) if sep and head.isdigit() else None


def _is_oracle(record: Any) -> bool:
    policy = (record.provenance or {}).get("policy") or {}
    options = policy.get("options") or {}
    return policy.get("kind") == "scripted" and options.get("variant", "oracle") == "oracle"


Finding = tuple[str, str, str]
"""``(status, detail, where)``: a finding of the card check."""


def _config_findings(
    entry: PresetEntry, ok: Sequence[Any], card: Mapping[str, Any]
) -> list[Finding]:
    """Every group's config against the card's, each distinct difference once."""
    from agentenvs.rollout.collect.run_identity import config_differences

    want = without_locations(entry, card["config"])
    seen: dict[str, list[str]] = {}
    for record in ok:
        changed = config_differences(without_locations(entry, record.env_config), want)
        if changed:
            seen.setdefault("; ".join(changed), []).append(record.key)
    return [
        (
            "fail",
            f"config differs from preset {entry.name} in {len(keys)} of {len(ok)} groups: {detail}",
            keys[0],
        )
        for detail, keys in seen.items()
    ]


def _data_findings(ok: Sequence[Any], card: Mapping[str, Any]) -> list[Finding]:
    """Each group's recorded data hashes against the card's, source by source."""
    want: dict[str, str] = card["data"]["sources"]
    found: list[Finding] = []
    seen: set[str] = set()
    unrecorded = [r.key for r in ok if "data" not in ((r.provenance or {}).get("env") or {})]
    if unrecorded:
        found.append(
            (
                "warn",
                f"{len(unrecorded)} group(s) record no data hashes (collected "
                "before stores recorded them): their data is not compared",
                unrecorded[0],
            )
        )
    for record in ok:
        stored = ((record.provenance or {}).get("env") or {}).get("data")
        if stored is None:
            continue
        for source in sorted(set(stored) | set(want)):
            before, now = stored.get(source, "(not read)"), want.get(source, "(not read)")
            if before != now and source not in seen:
                seen.add(source)
                found.append(
                    (
                        "fail",
                        f"data {source}: {before} in the store, {now} in the card "
                        "(its content differs)",
                        record.key,
                    )
                )
    return found


def _sampling_findings(ok: Sequence[Any], card: Mapping[str, Any]) -> list[Finding]:
    """The sampling each group recorded against the original's; a policy that does not
    sample (the scripted oracle) records none and is not compared."""
    want = card["sampling"]
    found: list[Finding] = []
    seen: set[str] = set()
    for record in ok:
        sampling = (record.provenance or {}).get("sampling") or {}
        for name in ("temperature", "top_p"):
            value, card_value = sampling.get(name), want[name]
            drifted = value is not None and card_value is not None and value != card_value
            if drifted and name not in seen:
                seen.add(name)
                detail = f"sampling {name}: {value:g} in the store, {card_value:g} in the card"
                found.append(("fail", detail, record.key))
        cap, per_turn = sampling.get("max_tokens"), want["max_tokens_per_turn"]
        if cap is not None and per_turn is not None and cap < per_turn and "cap" not in seen:
            seen.add("cap")
            found.append(
                (
                    "fail",
                    f"per-turn max_tokens: {cap} in the store, {per_turn} in the "
                    "card (turns cut shorter than the original's)",
                    record.key,
                )
            )
    return found


def check_store_against_card(
    records: Sequence[Any],
    name: str,
    tokenizer: Any,
    *,
    count: int | None = None,
    location: Mapping[str, Any] | None = None,
) -> list[Finding]:
    """``(status, detail, where)`` findings of a store's ok records against preset
    ``name``'s card, computed now with ``tokenizer`` on this machine's data for the preset
    (its defaults, or ``location``: the location keys as ``make`` takes them)."""
    entry = preset(name)
    ok = [r for r in records if r.status == "ok" and r.group is not None]
    if not ok:
        return [("fail", "the store holds no ok group to compare with the card", "")]
    found: list[Finding] = []
    wrong_env = [r for r in ok if r.env != entry.env]
    if wrong_env:
        found.append(
            ("fail", f"env {wrong_env[0].env!r}; preset {name} is {entry.env!r}", wrong_env[0].key)
        )
        return found
    split = str(ok[0].task_id).split("/", 1)[0] if "/" in str(ok[0].task_id) else "train"
    slots = [_slot(r.key) for r in ok]
    if any(slot is None for slot in slots):  # keys the caller chose: store order is the order
        slots = list(range(len(ok)))
    card = compute_card(
        name,
        tokenizer,
        split=split,
        count=count or max(slots) + 1,  # type: ignore[type-var, operator]
        location=location,
    )
    summary = f"card {name}: config {card['config_sha256']}, panel {card['task_panel']['sha256']}"
    found += _config_findings(entry, ok, card)
    found += _data_findings(ok, card)
    found += _sampling_findings(ok, card)
    panel = card["task_panel"]["ids"]
    for slot, record in sorted(zip(slots, ok, strict=True), key=lambda pair: pair[0]):
        want = panel[slot] if slot < len(panel) else "(beyond the panel)"  # type: ignore[operator]
        if record.task_id != want:
            found.append(
                (
                    "fail",
                    f"group {slot} is task {record.task_id}; the card's panel has {want}",
                    record.key,
                )
            )
            break
    by_task = dict(zip(panel, card["first_prompts"]["per_task"], strict=True))
    for record in ok:
        want = by_task.get(record.task_id)
        for t, traj in enumerate(record.group.trajectories):
            if want is None or not traj.transitions:
                continue
            if digest_tokens(traj.transitions[0].ob) != want:
                found.append(
                    (
                        "fail",
                        "first prompt differs from what the preset renders now (prompt strings, "
                        "task text or chat template changed)",
                        f"{record.key} traj {t}",
                    )
                )
                break
        else:
            continue
        break
    stored_key = (ok[0].run or {}).get("tokenizer")
    now = card["chat_template"]["tokenizer"]
    if stored_key and stored_key != now:
        found.append(("fail", f"tokenizer {stored_key} in the store, {now} in the card", ok[0].key))
    oracle = [r for r in ok if _is_oracle(r)]
    low, high = entry.oracle_band
    for record in oracle:
        outside = [x for x in record.group.total_rewards() if not low - 1e-9 <= x <= high + 1e-9]
        if outside:
            found.append(
                (
                    "fail",
                    f"scripted oracle reward {outside[0]:g} outside the card's band "
                    f"[{low:g}, {high:g}] (reward function or its knobs changed)",
                    record.key,
                )
            )
            break
    if not any(status == "fail" for status, _, _ in found):
        band = f"; oracle rewards in [{low:g}, {high:g}]" if oracle else ""
        found.append(
            (
                "pass",
                f"{summary}: {len(ok)} groups on the panel, prompts match, every group's "
                f"config, data and sampling match{band}",
                "",
            )
        )
    return found


def card_findings(
    records: Sequence[Any], name: str, tokenizer: Any, *, location: Mapping[str, Any] | None = None
) -> list[Any]:
    """:func:`check_store_against_card` as ``agentenvs check`` findings (fixed_input)."""
    from agentenvs.rollout.inspect.findings import Check
    from agentenvs.rollout.inspect.findings import Finding as CheckFinding

    return [
        CheckFinding(Check.FIXED_INPUT, status, detail, where)  # type: ignore[arg-type]
        for status, detail, where in check_store_against_card(
            records, name, tokenizer, location=location
        )
    ]
