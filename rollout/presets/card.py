"""Reproduction cards: what a preset's run must hold fixed, as hashes, and a check of a
store against it.

A card is computed from the live configuration (never stored with the code: the
environment halves keep changing, and a card is only worth what the code it hashes
says now). It holds:

* the preset's resolved environment config and its hash;
* the task panel: the exact task ids, in order, of the first ``count`` tasks of a split;
* the panel's first prompts as the policy sees them (token ids under the given
  tokenizer: this covers prompt strings, the task text and the chat template at once);
* the data the config points at (corpus, index, questions, problems, game files);
* the source of the prompt strings and of the reward function, hashed;
* the tokenizer (vocabulary and chat template) and renderer;
* the scripted oracle's reward band.

:func:`check_store_against_card` fails a store that drifted: another environment,
another preset or changed knobs, tasks out of the panel's order, first prompts that
differ from what the environment renders now, another chat template, or (for a store
the scripted oracle collected) rewards outside the oracle's band.
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

from agentenvs.rollout.presets.registry import PresetEntry, preset

CARD_VERSION = 1
DEFAULT_PANEL = 8


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:16]


def digest_tokens(tokens: Sequence[int]) -> str:
    return _sha(array("q", list(tokens)).tobytes())


def _file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def _module_sha(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(f"module {module} not found")
    return _file_sha(Path(spec.origin))


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


def _data_files(config: Any, entry: PresetEntry, split: str, count: int) -> dict[str, Path]:
    """The files a preset's tasks and corpus come from (what the location keys point at,
    or what agentenvs ships)."""
    package = Path(importlib.util.find_spec(f"agentenvs.envs.{entry.env}").origin).parent  # type: ignore[arg-type, union-attr]
    files: dict[str, Path] = {}
    dumped = config.model_dump(mode="json")
    if entry.env == "alfworld":
        for game in config.games(split)[:count]:
            folder = Path(game.path).parent
            for path in sorted(folder.iterdir()):
                if path.is_file():
                    files[f"{game.name}/{path.name}"] = path
        return files
    for key in entry.location_keys:
        value = _get(dumped, key)
        if value:
            path = Path(value).expanduser()
            items = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            for item in items:
                files[f"{key}:{item.relative_to(path) if path.is_dir() else item.name}"] = item
    shipped = package / "data"
    if shipped.is_dir():
        for item in sorted(shipped.glob("*.jsonl")):
            files.setdefault(f"shipped:{item.name}", item)
    return files


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
        payload["strings_file_sha256"] = _file_sha(Path(strings_file).expanduser())
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
    from agentenvs.envs.tokenizer_fingerprint import tokenizer_key

    entry = preset(name)
    config = make(entry.env, preset=name, **dict(location or {}))
    try:
        count = min(count, config.num_tasks(split))
        ids = [config.task_id(i, split) for i in range(count)]
        dumped = config.model_dump(mode="json")
        prompts = asyncio.run(_first_prompts(config, tokenizer, split, count))
        files = _data_files(config, entry, split, count)
    finally:
        _shutdown(config)
    data = {key: _file_sha(path) for key, path in files.items()}
    return {
        "card_version": CARD_VERSION,
        "preset": name,
        "env": entry.env,
        "split": split,
        "config": dumped,
        "config_sha256": config.config_hash(),
        "task_panel": {"count": count, "ids": ids, "sha256": _sha("\n".join(ids))},
        "first_prompts": {"per_task": prompts, "sha256": _sha("".join(prompts))},
        "data": {"files": data, "sha256": _sha(json.dumps(data, sort_keys=True))},
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


def check_store_against_card(
    records: Sequence[Any], name: str, tokenizer: Any, *, count: int | None = None
) -> list[tuple[str, str, str]]:
    """``(status, detail, where)`` findings of a store's ok records against preset
    ``name``'s card (computed now, with the store's data locations and ``tokenizer``)."""
    from agentenvs.rollout.collect.run_identity import config_differences

    entry = preset(name)
    ok = [r for r in records if r.status == "ok" and r.group is not None]
    if not ok:
        return [("fail", "the store holds no ok group to compare with the card", "")]
    found: list[tuple[str, str, str]] = []
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
        location=location_of(entry, ok[0].env_config),
    )
    summary = f"card {name}: config {card['config_sha256']}, panel {card['task_panel']['sha256']}"
    changed = config_differences(ok[0].env_config, card["config"])
    if changed:
        found.append(
            ("fail", f"config differs from preset {name}: " + "; ".join(changed), ok[0].key)
        )
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
        found.append(("pass", f"{summary}: {len(ok)} groups on the panel, prompts match{band}", ""))
    return found


def card_findings(records: Sequence[Any], name: str, tokenizer: Any) -> list[Any]:
    """:func:`check_store_against_card` as ``agentenvs check`` findings (fixed_input)."""
    from agentenvs.rollout.inspect.findings import Check, Finding

    return [
        Finding(Check.FIXED_INPUT, status, detail, where)  # type: ignore[arg-type]
        for status, detail, where in check_store_against_card(records, name, tokenizer)
    ]
