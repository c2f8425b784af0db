"""One run as ``agentenvs compare`` sees it: its outcomes per task and the settings it ran with.

A trajectory store may hold several runs (``--new-run`` appends one after another);
the run compared is the store's latest, the one its last record belongs to, and of
each of its groups the latest outcome (what ``view`` and resume count). Everything
comparability needs is read from what the records carry (run identity, provenance,
env config), never from the machine the comparison runs on: the point is to check
what *was* run.

A JSONL hand-off (training samples) carries rewards but no provenance: it compares
by group index, and the missing provenance is itself a difference to accept.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentenvs.envs.types import Trajectory
from agentenvs.rollout.collect.records import GroupRecord

SUCCESS_METRICS = ("success", "won", "correct")
"""Metric names an environment uses for "the task was solved" (ALFWorld ``won``,
ReTool ``correct``); the first found in a run decides its success rate."""
COMPLETED_RULE = "stop reason completed with a positive reward"


@dataclass
class TaskOutcome:
    """Every trajectory a run produced for one task (pooled when a panel repeats a task)."""

    task_id: str
    rewards: list[float] = field(default_factory=list)
    successes: list[bool] = field(default_factory=list)

    @property
    def mean_reward(self) -> float:
        return sum(self.rewards) / len(self.rewards)

    @property
    def success_rate(self) -> float:
        return sum(self.successes) / len(self.successes)


@dataclass(frozen=True)
class WeightsFacts:
    """What a run says it evaluated: a name, a content hash when one was recorded, a version."""

    name: str | None
    sha256: str | None = None
    version: int | str | None = None
    path: str | None = None

    def label(self) -> str:
        text = self.name or "(unnamed)"
        if self.version is not None:
            text += f" v{self.version}"
        return text + (f" sha256 {self.sha256[:12]}" if self.sha256 else " (no content hash)")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sha256": self.sha256,
            "version": self.version,
            "path": self.path,
        }


@dataclass
class Run:
    """A run to compare: where it came from, its outcomes by task, its settings."""

    path: Path
    label: str
    kind: Literal["store", "samples"]
    records: list[GroupRecord]
    tasks: dict[str, TaskOutcome]
    panel: frozenset[str]
    """Every task id the run attempted (failed groups included)."""
    settings: dict[str, Any]
    """Comparability facts by name (``runs.SETTING_NAMES``); ``None``: not recorded."""
    weights: list[WeightsFacts]
    success_rule: str
    earlier_runs: int = 0
    """Runs before this one in the same store (not compared)."""


def load_run(path: Path, label: str) -> Run:
    """The latest run of a trajectory store, or a JSONL hand-off, read from ``path``."""
    from agentenvs.rollout.inspect.check import file_kind

    kind = file_kind(path)
    if kind == "samples":
        return _load_samples(path, label)
    from agentenvs.rollout.cli.common import read_store_warning

    contents = read_store_warning(path)
    if not contents.records:
        raise ValueError(f"{path}: the store holds no records")
    last = str(contents.records[-1].run.get("fingerprint", ""))
    fingerprints = list(dict.fromkeys(str(r.run.get("fingerprint", "")) for r in contents.records))
    mine = [r for r in contents.records if str(r.run.get("fingerprint", "")) == last]
    from agentenvs.rollout.collect.store import latest_outcomes

    records = latest_outcomes(mine)
    rule = success_rule(t for r in records if r.group is not None for t in r.group.trajectories)
    tasks: dict[str, TaskOutcome] = {}
    for record in records:
        if record.group is None:
            continue
        outcome = tasks.setdefault(record.task_id, TaskOutcome(record.task_id))
        for traj, total in zip(
            record.group.trajectories, record.group.total_rewards(), strict=True
        ):
            outcome.rewards.append(total)
            outcome.successes.append(trajectory_success(traj, total, rule))
    from agentenvs.rollout.compare.settings import run_settings, run_weights

    return Run(
        path=path,
        label=label,
        kind="store",
        records=records,
        tasks=tasks,
        panel=frozenset(r.task_id for r in records),
        settings=run_settings(records),
        weights=run_weights(records),
        success_rule=rule,
        earlier_runs=len(fingerprints) - 1,
    )


def success_rule(trajectories: Iterable[Trajectory]) -> str:
    """``metric NAME`` when the run's steps report one of :data:`SUCCESS_METRICS`, else
    :data:`COMPLETED_RULE`: one rule for the whole run, so every trajectory counts alike."""
    seen: set[str] = set()
    for traj in trajectories:
        for transition in traj.transitions:
            seen.update(k for k in transition.metrics if k in SUCCESS_METRICS)
    for name in SUCCESS_METRICS:
        if name in seen:
            return f"metric {name}"
    return COMPLETED_RULE


def trajectory_success(traj: Trajectory, total: float, rule: str) -> bool:
    if rule.startswith("metric "):
        name = rule.removeprefix("metric ")
        return any(float(t.metrics.get(name, 0) or 0) > 0 for t in traj.transitions)
    return traj.stop_reason == "completed" and total > 0


def _load_samples(path: Path, label: str) -> Run:
    """A JSONL hand-off: one reward per (group, trajectory), tasks named by group index."""
    tasks: dict[str, TaskOutcome] = {}
    seen: set[tuple[int, int]] = set()
    tokens = 0
    with open(path, encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                line = json.loads(text)
                slot = (int(line["group_index"]), int(line["traj_index"]))
                reward = float(line["reward"])
                tokens += sum(int(m) for m in line.get("loss_mask", []))
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(f"{path}:{number}: not a training sample line ({error})") from None
            if slot in seen:  # a trajectory split into several samples: one reward
                continue
            seen.add(slot)
            outcome = tasks.setdefault(f"group/{slot[0]}", TaskOutcome(f"group/{slot[0]}"))
            outcome.rewards.append(reward)
            outcome.successes.append(reward > 0)
    if not tasks:
        raise ValueError(f"{path}: the samples file holds no samples")
    sizes = {len(t.rewards) for t in tasks.values()}
    settings: dict[str, Any] = {"group_size": sizes.pop() if len(sizes) == 1 else None}
    return Run(
        path=path,
        label=label,
        kind="samples",
        records=[],
        tasks=tasks,
        panel=frozenset(tasks),
        settings={**settings, "handoff_tokens": tokens},
        weights=[],
        success_rule="a positive reward (a hand-off records no success)",
    )


def run_labels(paths: list[Path]) -> list[str]:
    """Short names for the runs: file names, with their folders when two share a name."""
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    longer = [f"{p.parent.name}/{p.name}" for p in paths]
    if len(set(longer)) == len(longer):
        return longer
    return [f"{i + 1}:{p}" for i, p in enumerate(paths)]


def mapping_or_empty(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
