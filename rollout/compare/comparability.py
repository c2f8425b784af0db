"""Whether two runs can be compared at all, and if not, exactly what differs.

A difference in mean reward means something only when both runs saw the same tasks
under the same budget, sampling, rendering and group size. Every setting that
differs is named with both values; the comparison is refused unless the user
accepts each differing setting by name (``--allow policy,weights``: usually the
point of the comparison). A setting one run did not record counts as differing:
an unknown cannot be shown equal.

Weights get their own reading, because names and contents can disagree: the same
content hash under two names is the same weights (a note, not a difference); one
name over two hashes is two different weights (a difference, and a note saying
so); without hashes only names and versions can be compared, which the note says.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentenvs.rollout.compare.runs import Run, WeightsFacts
from agentenvs.rollout.compare.settings import SETTING_NAMES

_SCALARS = ("env", "split", "template", "tokenizer", "group_size")
_DICTS = ("config", "budget", "sampling", "renderer", "tool_parser", "policy")
_SHOWN_IDS = 3


@dataclass(frozen=True)
class Difference:
    setting: str
    """One of :data:`~agentenvs.rollout.compare.settings.SETTING_NAMES`."""
    detail: str
    runs: tuple[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"setting": self.setting, "detail": self.detail, "runs": list(self.runs)}


@dataclass
class Comparability:
    differences: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    allowed: frozenset[str] = frozenset()

    @property
    def refused(self) -> list[str]:
        """Differing settings the user did not accept, in :data:`SETTING_NAMES` order."""
        differing = {d.setting for d in self.differences}
        return [s for s in SETTING_NAMES if s in differing and s not in self.allowed]

    @property
    def comparable(self) -> bool:
        return not self.refused

    def to_json(self) -> dict[str, Any]:
        return {
            "comparable": self.comparable,
            "differences": [
                {**d.to_json(), "allowed": d.setting in self.allowed} for d in self.differences
            ],
            "refused": self.refused,
            "allowed": sorted(self.allowed),
            "notes": list(self.notes),
        }


class UnknownSettingError(ValueError):
    """``--allow`` named a setting compare does not know."""


def parse_allow(items: Iterable[str]) -> frozenset[str]:
    """``["policy,weights", "budget"]`` -> the setting names; an unknown name is refused."""
    names = {part.strip() for item in items for part in item.split(",") if part.strip()}
    unknown = sorted(names - set(SETTING_NAMES))
    if unknown:
        raise UnknownSettingError(
            f"--allow: unknown setting {', '.join(unknown)}; known: {', '.join(SETTING_NAMES)}"
        )
    return frozenset(names)


def check_comparable(runs: list[Run], allowed: frozenset[str]) -> Comparability:
    """Every run against the first (the baseline)."""
    result = Comparability(allowed=allowed)
    base = runs[0]
    for other in runs[1:]:
        differences, notes = compare_two(base, other)
        result.differences += differences
        result.notes += notes
    for run in runs:
        if run.earlier_runs:
            result.notes.append(
                f"{run.label} holds {run.earlier_runs + 1} runs; compared: its latest"
            )
    return result


def compare_two(a: Run, b: Run) -> tuple[list[Difference], list[str]]:
    pair = (a.label, b.label)
    found: list[Difference] = []

    def differ(setting: str, detail: str) -> None:
        found.append(Difference(setting, detail, pair))

    if a.panel != b.panel:
        differ("panel", _panel_detail(a, b))
    handoffs = [r.label for r in (a, b) if r.kind == "samples"]
    if handoffs:
        differ(
            "provenance",
            f"{' and '.join(handoffs)}: a JSONL hand-off records no task ids, split, budget, "
            "sampling, template or weights; tasks are paired by group index",
        )
        if a.settings.get("group_size") != b.settings.get("group_size"):
            differ("group_size", _both("group size", a, b, "group_size"))
        return found, []
    for setting in _SCALARS:
        if a.settings.get(setting) != b.settings.get(setting):
            differ(setting, _both(setting.replace("_", " "), a, b, setting))
    for setting in _DICTS:
        lead = "tool calls parsed differently: " if setting == "tool_parser" else ""
        for key, left, right in dict_differences(a.settings[setting], b.settings[setting]):
            differ(setting, f"{lead}{key}: {_show(left)} in {a.label}, {_show(right)} in {b.label}")
    notes = []
    if a.settings.get("seed") != b.settings.get("seed"):
        notes.append(
            f"sampling seeds differ ({_show(a.settings.get('seed'))} in {a.label}, "
            f"{_show(b.settings.get('seed'))} in {b.label}): two samples of the same settings"
        )
    weights, weight_notes = weights_differences(a, b)
    for detail in weights:
        differ("weights", detail)
    return found, notes + weight_notes


def dict_differences(
    left: Mapping[str, Any], right: Mapping[str, Any]
) -> list[tuple[str, Any, Any]]:
    """``(dotted key, left value, right value)`` for every leaf that differs."""
    flat_left, flat_right = _flatten(left), _flatten(right)
    keys = sorted(set(flat_left) | set(flat_right))
    return [
        (k, flat_left.get(k), flat_right.get(k))
        for k in keys
        if flat_left.get(k) != flat_right.get(k)
    ]


def _flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, Mapping) and item:
            flat.update(_flatten(item, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = item
    return flat


def _show(value: Any) -> str:
    return "not recorded" if value is None else json.dumps(value, default=str)


def _both(name: str, a: Run, b: Run, setting: str) -> str:
    left, right = a.settings.get(setting), b.settings.get(setting)
    return f"{name}: {_show(left)} in {a.label}, {_show(right)} in {b.label}"


def _panel_detail(a: Run, b: Run) -> str:
    parts = []
    for run, other in ((a, b), (b, a)):
        only = sorted(run.panel - other.panel)
        if only:
            shown = ", ".join(only[:_SHOWN_IDS]) + (", ..." if len(only) > _SHOWN_IDS else "")
            parts.append(f"{len(only)} tasks only in {run.label} ({shown})")
    return f"task panels differ ({len(a.panel)} vs {len(b.panel)} tasks): " + "; ".join(parts)


def weights_differences(a: Run, b: Run) -> tuple[list[str], list[str]]:
    """The weights differences of two runs and the notes that explain them."""
    if {w for w in a.weights} == {w for w in b.weights}:
        unhashed = [w for w in a.weights if w.sha256 is None]
        notes = (
            [
                f"weights {', '.join(w.label() for w in unhashed)}: no content hash recorded, "
                "so only the name and version say they are the same"
            ]
            if unhashed
            else []
        )
        return [], notes
    differences: list[str] = []
    notes: list[str] = []
    a_hashes = {w.sha256 for w in a.weights if w.sha256}
    b_hashes = {w.sha256 for w in b.weights if w.sha256}
    hashed = all(w.sha256 for w in [*a.weights, *b.weights]) and a.weights and b.weights
    if hashed and a_hashes == b_hashes:
        notes.append(
            f"same weights under different names: sha256 {', '.join(sorted(h[:12] for h in a_hashes))} "
            f"is {_names(a.weights)} in {a.label} and {_names(b.weights)} in {b.label}"
        )
        return [], notes
    for name in sorted(_by_name(a.weights).keys() & _by_name(b.weights).keys()):
        left, right = _by_name(a.weights)[name], _by_name(b.weights)[name]
        if left and right and left != right:
            notes.append(
                f"different weights under one name: {name} is sha256 "
                f"{', '.join(sorted(h[:12] for h in left))} in {a.label} and "
                f"{', '.join(sorted(h[:12] for h in right))} in {b.label}"
            )
    differences.append(
        f"{_labels(a.weights)} in {a.label}, {_labels(b.weights)} in {b.label}"
        + ("" if hashed else " (no content hash on one side: names and versions compared)")
    )
    return differences, notes


def _by_name(weights: list[WeightsFacts]) -> dict[str, set[str]]:
    named: dict[str, set[str]] = {}
    for w in weights:
        if w.name is not None:
            named.setdefault(w.name, set()).update({w.sha256} if w.sha256 else set())
    return named


def _names(weights: list[WeightsFacts]) -> str:
    return ", ".join(sorted({w.name or "(unnamed)" for w in weights}))


def _labels(weights: list[WeightsFacts]) -> str:
    return ", ".join(w.label() for w in weights) or "not recorded"
