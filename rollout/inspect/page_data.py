"""The data an HTML view carries: every group as compact JSON, rendered by the page.

A page with hundreds of groups cannot hold every token as an HTML element: it
was 6x the size of the JSONL and slow to open. The page instead embeds this
data once and draws a group when it is opened. Each token stream is stored as
its decoded text plus the offsets where pieces end (in UTF-16 code units,
which is how JavaScript indexes strings), the token ids, and logprobs rounded
to 4 decimals, which is all hovering and shading need.

Settings shared by many groups (provenance, env config) are stored once and
referred to by index, so a 100-group run does not repeat them 100 times. A tree
rollout's group also carries its tree (``tree_page.py``): branch points, the value
of each branch and each leaf's parent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.inspect.images_page import image_sources
from agentenvs.rollout.inspect.tool_checks import describe_counts, episode_tool_counts
from agentenvs.rollout.inspect.tree_page import tree_data
from agentenvs.rollout.inspect.viewer import (
    GroupView,
    Span,
    TrajectoryView,
    end_of_turn,
    group_view,
    overview,
)

_KIND_CODES = {"prompt": "p", "env": "e", "sampled": "s"}


def _utf16_ends(text: str, ends: list[int]) -> list[int]:
    """Code-point offsets as UTF-16 offsets (characters outside the BMP count twice)."""
    if not text or max(text) < "\U00010000":
        return ends
    widths = [2 if ch >= "\U00010000" else 1 for ch in text]
    converted, total, previous = [], 0, 0
    for end in ends:
        total += sum(widths[previous:end])
        converted.append(total)
        previous = end
    return converted


def _number(value: Any) -> Any:
    """JSON-safe: NaN and infinities become strings (JSON has no literal for them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _round(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)


def span_data(span: Span, images: _Shared | None = None) -> dict[str, Any]:
    decoded = span.decoded
    data: dict[str, Any] = {
        "k": _KIND_CODES[span.kind],
        "t": decoded.text,
        "e": _utf16_ends(decoded.text, decoded.ends),
        "ids": decoded.ids,
    }
    if span.turn is not None:
        data["turn"] = span.turn
    if span.restart:
        data["restart"] = True
    if decoded.counts is not None:
        data["n"] = decoded.counts
    if any(lp is not None for lp in decoded.logprobs):
        data["lp"] = [_round(lp) for lp in decoded.logprobs]
    if decoded.special:
        data["sp"] = decoded.special
    if span.versions:  # tokens of several weights versions: [[tokens, version, proof], ...]
        data["vr"] = span.versions
    if span.images and images is not None:  # drawn inline at their turn (images_page.py)
        data["img"] = [[start, count, images.ref(sha)] for start, count, sha in span.images]
    return data


def trajectory_data(
    traj: TrajectoryView, advantage: float | None, images: _Shared | None = None
) -> dict[str, Any]:
    return {
        "reward": _number(traj.total_reward),
        "step": _number(traj.step_reward),
        "group": _number(traj.group_reward),
        "adv": None if advantage is None else _number(advantage),
        "stop": traj.stop_reason,
        "sampled": traj.sampled_tokens,
        "masked": traj.masked_tokens,
        "samples": traj.samples,
        "turns": [
            [
                row.turn,
                row.action_tokens,
                row.observation_tokens,
                row.sampler_stop,
                _number(row.reward),
                {k: _number(v) for k, v in row.metrics.items()},
                row.restart,
                _round(row.mean_logprob),
            ]
            for row in traj.turns
        ],
        "spans": [span_data(s, images) for s in traj.spans],
    }


def group_metrics_summary(view: GroupView, record: GroupRecord) -> dict[str, float]:
    """Numeric env metrics per group, for filtering and sorting: the mean over its
    trajectories of each final-step metric, and of each group metric (``group/...``)."""
    sums: dict[str, list[float]] = {}
    if record.group is not None:
        for traj in record.group.trajectories:
            final = traj.transitions[-1].metrics if traj.transitions else {}
            for name, value in final.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    sums.setdefault(name, []).append(float(value))
    for metrics in view.group_metrics:
        for name, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                sums.setdefault(f"group/{name}", []).append(float(value))
    return {name: round(sum(v) / len(v), 6) for name, v in sorted(sums.items()) if v}


class _Shared:
    """Distinct JSON blobs, stored once in the page and referred to by index."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._index: dict[str, int] = {}

    def ref(self, value: Any) -> int:
        key = json.dumps(value, sort_keys=True, default=str)
        if key not in self._index:
            self._index[key] = len(self.items)
            self.items.append(json.loads(key))
        return self._index[key]


def group_data(
    tokenizer: Any,
    record: GroupRecord,
    index: int,
    shared: _Shared,
    images: _Shared | None = None,
) -> dict[str, Any]:
    view = group_view(tokenizer, record, index)
    advantages = record.extra.get("advantages")
    if not isinstance(advantages, list) or len(advantages) != len(view.trajectories):
        advantages = [None] * len(view.trajectories)
    extra = {k: v for k, v in record.extra.items() if k not in ("advantages",)}
    return {
        "i": index,
        "key": record.key,
        "task": record.task_id,
        "env": record.env,
        "status": record.status,
        "error": record.error,
        "traceback": view.traceback,
        "attempts": record.attempts,
        "tags": view.tags,
        "reward": _number(view.mean_reward),
        "rewards": [_number(t.total_reward) for t in view.trajectories],
        "stops": [t.stop_reason for t in view.trajectories],
        "metrics": group_metrics_summary(view, record),
        "gm": [{k: _number(v) for k, v in m.items()} for m in view.group_metrics],
        "est": record.extra.get("advantage_estimator"),
        "prov": shared.ref(record.provenance),
        "config": shared.ref(record.env_config),
        "extra": shared.ref(extra),
        "trajs": [
            {**trajectory_data(t, a, images), "tools": _tools(record, t.index)}
            for t, a in zip(view.trajectories, advantages, strict=True)
        ],
        "tree": tree_data(record),
    }


def _tools(record: GroupRecord, index: int) -> str:
    """The episode's tool calls in one line ("" without tools): see ``tool_checks``."""
    if record.group is None:
        return ""
    return describe_counts(episode_tool_counts(record.group.trajectories[index]))


def page_data(
    records: Sequence[GroupRecord],
    tokenizer: Any,
    *,
    source: str = "",
    tokenizer_name: str = "",
    selected: Sequence[tuple[int, GroupRecord]] | None = None,
) -> dict[str, Any]:
    """Everything the page shows. ``selected`` limits the groups carried (``--group``)."""
    shared, images = _Shared(), _Shared()
    chosen = list(enumerate(records)) if selected is None else list(selected)
    groups = [group_data(tokenizer, record, index, shared, images) for index, record in chosen]
    summary = overview(list(records))
    return {
        "source": source,
        "tokenizer": tokenizer_name,
        "summary": {k: _number(v) for k, v in summary.items()},
        "eot": end_of_turn([record for _, record in chosen], tokenizer).note(),
        "groups": groups,
        "shared": shared.items,
        **({"images": image_sources(images.items, source)} if images.items else {}),
    }


def embed_json(data: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``: no ``</`` can
    close the element and no ``<!--`` can open a comment."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("</", "<\\/").replace("<!--", "\\u003c!--")
