"""The collector: many groups concurrently, with retries, timeouts, a store and resume.

Every group handed in ends in exactly one of three ways: skipped (the store already
holds it), an ``ok`` record, or a ``failed`` record that names the error and the
number of attempts. Nothing is dropped silently. Each record is appended to the
store as soon as its group finishes, so a run killed at any moment keeps all the
groups it finished, and a rerun with the same store picks up where it stopped.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.types import EnvGroupBuilder
from agentenvs.rollout.collect.executors import GroupExecutor, InProcessExecutor
from agentenvs.rollout.collect.finish import RecordStamps
from agentenvs.rollout.collect.options import check_collect_options
from agentenvs.rollout.collect.plan import PlannedGroup, plan_collection
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.rollouts import first_error
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.data.advantages import Estimator
from agentenvs.rollout.policies.base import Policy, PolicyFactory


@dataclass
class CollectionResult:
    records: list[GroupRecord] = field(default_factory=list)
    """This run's records, ok and failed, in completion order."""
    skipped: int = 0
    """Groups skipped because the store already had them."""

    @property
    def ok(self) -> list[GroupRecord]:
        return [r for r in self.records if r.status == "ok"]

    @property
    def failed(self) -> list[GroupRecord]:
        return [r for r in self.records if r.status == "failed"]


async def collect(
    builders: Sequence[EnvGroupBuilder],
    policy: Policy | PolicyFactory,
    *,
    concurrency: int = 8,
    retries: int = 1,
    group_timeout: float | None = None,
    store: TrajectoryStore | None = None,
    keys: Sequence[str] | None = None,
    env_name: str = "",
    env_config: dict | None = None,
    provenance: dict | None = None,
    progress: bool = True,
    advantage_estimator: Estimator = "grpo",
    normalize_std: bool = False,
    new_run: bool = False,
    executor: GroupExecutor | None = None,
) -> CollectionResult:
    """Run every group, at most ``concurrency`` at a time.

    A group that raises or exceeds ``group_timeout`` seconds is tried again with
    fresh envs up to ``retries`` more times, then recorded as failed
    (:func:`~agentenvs.rollout.collect.attempts.run_group_attempts`). Keys already
    stored as ``ok`` are skipped. Errors of the store itself (a full disk) stop the
    run: carrying on would lose data. Each ok record carries its group's advantages
    under ``extra["advantages"]`` with the estimator that made them, so the stored
    data says how its loss inputs were computed.

    Each record's task id, env name and config are what its builder's ``describe()``
    says, with ``env_name`` and ``env_config``, when given, in place of the
    builder's own (:mod:`~agentenvs.rollout.collect.plan`). Each record also
    carries the run's identity (env, config hash, split, tokenizer, policy, group
    size). Resuming into a store whose latest run is a different one raises
    :class:`RunMismatchError` saying what differs, unless ``new_run`` asks to
    append a new run to the file.

    ``executor`` says where episodes run: in this process (the default) or in Ray
    actors (:class:`~agentenvs.rollout.collect.executors.ray_executor.RayExecutor`);
    records, store and resume are the same either way.

    The stages: check the arguments, plan (keys, identity, resume), run each
    group, finish its record (:class:`~agentenvs.rollout.collect.finish.RecordStamps`),
    store it.
    """
    check_collect_options(concurrency=concurrency, retries=retries, group_timeout=group_timeout)
    plan = plan_collection(
        builders,
        policy,
        keys=keys,
        env_name=env_name,
        env_config=env_config,
        provenance=provenance,
        store=store,
        new_run=new_run,
    )
    stamps = RecordStamps(
        plan.identity,
        provenance,
        advantage_estimator=advantage_estimator,
        normalize_std=normalize_std,
    )
    result = CollectionResult(skipped=plan.skipped)
    semaphore = asyncio.Semaphore(concurrency)
    runner = await (executor or InProcessExecutor()).start(
        policy, [planned.builder for planned in plan.groups]
    )

    with _ProgressBar(len(plan.groups), enabled=progress) as bar:

        async def run_one(planned: PlannedGroup) -> None:
            async with semaphore:
                record = await runner.run_group(
                    planned.builder, planned.key, retries=retries, group_timeout=group_timeout
                )
            stamps.finish(record, planned, runner.described_policy(record, policy))
            if store is not None:
                store.append(record)
            result.records.append(record)
            bar.advance(record)

        try:
            async with asyncio.TaskGroup() as group:
                for planned in plan.groups:
                    group.create_task(run_one(planned))
        except BaseExceptionGroup as errors:  # only store failures get here
            raise first_error(errors) from None
        finally:
            await runner.close()
    return result


class _ProgressBar:
    """A transient rich progress bar, shown only on an interactive terminal."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        from rich.console import Console

        console = Console(file=sys.stderr)
        self.enabled = enabled and console.is_terminal and not console.is_dumb_terminal
        self.total = total
        self.failed = 0
        self._progress = None
        self._task = None
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("groups"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[failed]} failed"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )

    def __enter__(self) -> _ProgressBar:
        if self._progress is not None:
            self._progress.start()
            self._task = self._progress.add_task("collect", total=self.total, failed=0)
        return self

    def advance(self, record: GroupRecord) -> None:
        self.failed += record.status == "failed"
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=1, failed=self.failed)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def summarize(records: Sequence[GroupRecord]) -> dict[str, Any]:
    """Counts and means over records: what the CLI's summary table and JSON line show.

    Rewards are total rewards (step rewards plus group reward) of the trajectories
    of ``ok`` groups; failed groups count in ``failed`` only. ``reward_std`` is the
    spread over all trajectories; ``zero_advantage_share`` is the share of ok groups
    whose trajectories all got the same reward: they carry no learning signal for
    group-relative estimators, which is the first thing to look at in a new run.
    """
    ok = [r for r in records if r.status == "ok" and r.group is not None]
    rewards: list[float] = []
    turns: list[int] = []
    stop_reasons: Counter[str] = Counter()
    sampled = 0
    constant = 0
    for record in ok:
        assert record.group is not None
        totals = record.group.total_rewards()
        rewards.extend(totals)
        constant += len(set(totals)) <= 1
        for traj in record.group.trajectories:
            turns.append(len(traj.transitions))
            stop_reasons[traj.stop_reason or "unknown"] += 1
            sampled += sum(len(t.ac.tokens) for t in traj.transitions)
    mean = sum(rewards) / len(rewards) if rewards else 0.0
    spread = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5 if rewards else 0.0
    return {
        "groups": len(records),
        "ok": len(ok),
        "failed": sum(1 for r in records if r.status == "failed"),
        "trajectories": len(rewards),
        "mean_reward": mean,
        "reward_std": spread,
        "zero_advantage_share": constant / len(ok) if ok else 0.0,
        "mean_turns": sum(turns) / len(turns) if turns else 0.0,
        "tokens_sampled": sampled,
        "retried_groups": sum(1 for r in records if r.attempts > 1),
        "stop_reasons": dict(sorted(stop_reasons.items())),
    }
