"""The collector: many groups concurrently, with retries, timeouts, a store and resume.

Every group handed in ends in exactly one of three ways: skipped (the store already
holds it), an ``ok`` record, or a ``failed`` record that names the error and the
number of attempts. Nothing is dropped silently. Each record is appended to the
store as soon as its group finishes, so a run killed at any moment keeps all the
groups it finished, and a rerun with the same store picks up where it stopped.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.types import EnvGroupBuilder
from agentenvs.rollout.collect.attempts import describe_error, failed_record, format_traceback
from agentenvs.rollout.collect.cancels import STRAY_CANCEL, cancel_requested
from agentenvs.rollout.collect.executors import GroupExecutor, GroupRunner, InProcessExecutor
from agentenvs.rollout.collect.finish import RecordStamps
from agentenvs.rollout.collect.options import CollectOptions
from agentenvs.rollout.collect.plan import PlannedGroup, plan_collection
from agentenvs.rollout.collect.provenance import ProvenanceNotes, RunProvenance
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.rollouts import first_error
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.collect.store_lock import claim
from agentenvs.rollout.policies.base import Policy, PolicyFactory

__all__ = [
    "AllGroupsSkipped",
    "CollectOptions",
    "CollectionResult",
    "ProvenanceNotes",
    "collect",
    "summarize",
]


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
    options: CollectOptions | None = None,
    *,
    store: TrajectoryStore | None = None,
    keys: Sequence[str] | None = None,
    executor: GroupExecutor | None = None,
    notes: ProvenanceNotes | None = None,
) -> CollectionResult:
    """Run every group, at most ``options.concurrency`` at a time (:class:`CollectOptions`:
    concurrency, retries, group timeout, new run, progress, advantage estimator).

    A group that raises or exceeds ``group_timeout`` seconds is tried again with
    fresh envs up to ``retries`` more times, then recorded as failed
    (:func:`~agentenvs.rollout.collect.attempts.run_group_attempts`). Keys already
    stored as ``ok`` are skipped (a call that skips every group warns,
    :class:`AllGroupsSkipped`). Errors of the store itself (a full disk) stop the
    run: carrying on would lose data. Each ok record carries its group's advantages
    under ``extra["advantages"]`` with the estimator that made them, so the stored
    data says how its loss inputs were computed.

    What each record says of its group (task id, env name and config) and its
    provenance (tokenizer fingerprint and how to reload it; env name, version,
    config, renderer and protocol; policy; sampling) come from the builder's
    ``describe()`` and the policy's self-description, with what ``notes`` adds (a
    run spec's tokenizer spec, policy name and options, extra sections:
    :class:`~agentenvs.rollout.collect.provenance.ProvenanceNotes`). Each record also
    carries the run's identity (env, config hash, split, tokenizer, policy, group
    size). Resuming into a store whose latest run is a different one raises
    :class:`RunMismatchError` saying what differs, unless ``options.new_run`` asks to
    append a new run to the file.

    ``keys`` names the groups in the store, one unique key each; by default
    ``"<position>:<task id>"``, stable across reruns over the same builders, which
    is what resume needs. A loop that writes every step to one store must pass its
    own (``keys=[f"step{step}:{i}" ...]``): a later step's default keys repeat an
    earlier step's once the dataset wraps, and would be skipped as done.

    ``executor`` says where episodes run: in this process (the default) or in Ray
    actors (:class:`~agentenvs.rollout.collect.executors.ray_executor.RayExecutor`);
    records, store and resume are the same either way.

    The stages: claim the store (one run writes it at a time: a second is refused
    with :class:`~agentenvs.rollout.collect.store_lock.StoreBusy`), plan (keys,
    identity, resume), run each group, finish its record
    (:class:`~agentenvs.rollout.collect.finish.RecordStamps`), store it.
    """
    options = options or CollectOptions()
    with claim(store.path if store is not None else None):  # one run writes a store at a time
        return await _collect(builders, policy, options, store, keys, executor, notes)


async def _collect(
    builders: Sequence[EnvGroupBuilder],
    policy: Policy | PolicyFactory,
    options: CollectOptions,
    store: TrajectoryStore | None,
    keys: Sequence[str] | None,
    executor: GroupExecutor | None,
    notes: ProvenanceNotes | None,
) -> CollectionResult:
    plan = plan_collection(builders, policy, keys=keys, store=store, new_run=options.new_run)
    stamps = RecordStamps(
        plan.identity,
        RunProvenance(policy, notes),
        advantage_estimator=options.advantage_estimator,
        normalize_std=options.normalize_std,
    )
    warn_if_all_skipped(plan.skipped, len(plan.groups), store)
    result = CollectionResult(skipped=plan.skipped)
    semaphore = asyncio.Semaphore(options.concurrency)
    runner = await (executor or InProcessExecutor()).start(
        policy, [planned.builder for planned in plan.groups]
    )

    with _ProgressBar(len(plan.groups), enabled=options.progress) as bar:

        async def run_one(planned: PlannedGroup) -> None:
            async with semaphore:
                record = await run_group(runner, planned, options)
            stamps.finish(record, planned, runner.described_policy(record, policy))
            if store is not None:
                await store.commit(record)  # returns once on disk; the loop runs meanwhile
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


async def run_group(
    runner: GroupRunner, planned: PlannedGroup, options: CollectOptions
) -> GroupRecord:
    """The runner's record of one group. A ``CancelledError`` that escapes it although
    nobody cancelled the collection becomes that group's failed record: a task group
    drops a child that ends cancelled without a word, and the group would vanish."""
    try:
        return await runner.run_group(
            planned.builder,
            planned.key,
            retries=options.retries,
            group_timeout=options.group_timeout,
        )
    except asyncio.CancelledError as err:
        if cancel_requested():
            raise
        error = f"{describe_error(err)} ({STRAY_CANCEL})"
        return failed_record(planned.key, [error], format_traceback(err))


class AllGroupsSkipped(UserWarning):
    """A collection ran nothing: the store already held every group's key."""


def warn_if_all_skipped(skipped: int, to_run: int, store: TrajectoryStore | None) -> None:
    """Warn when a call skips every group it was given.

    That is a finished run resumed (harmless), or, in a training loop that reuses
    one store, a step whose default keys (``"<position>:<task id>"``) repeat an
    earlier step's once the dataset wraps: it silently collects nothing. Such a
    loop must pass its own ``keys=`` (the step in each key)."""
    if skipped and not to_run:
        warnings.warn(
            AllGroupsSkipped(
                f"all {skipped} groups skipped: {store.path if store else 'the store'} already "
                "holds their keys as this run's ok groups. If this is a new step of a loop "
                "that reuses the store, pass keys= unique to the step (e.g. "
                "keys=[f'step{step}:{i}' for i in range(len(builders))]); the default keys "
                "repeat when the dataset wraps"
            ),
            stacklevel=3,
        )


PROGRESS_SECONDS_VAR = "AGENTENVS_PROGRESS_SECONDS"
"""Off a terminal, at most one progress line per this many seconds (default 10)."""


class _ProgressBar:
    """A transient rich progress bar on an interactive terminal; elsewhere (a log
    file, CI, ``nohup``) one plain line now and then, so a long run is not silent
    until it ends: once the run has taken ``$AGENTENVS_PROGRESS_SECONDS`` seconds
    (10 by default), a line at each tenth of the groups, at most one per that many
    seconds, and one at the end. A shorter run (a training loop's step) prints none."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        from rich.console import Console

        console = Console(file=sys.stderr)
        interactive = console.is_terminal and not console.is_dumb_terminal
        self.enabled = enabled and interactive
        self.lines = enabled and not interactive and total > 0
        self.total = total
        self.done = 0
        self.failed = 0
        self._started = time.monotonic()
        self._last_line = -float("inf")
        self._printed = False
        self._interval = _progress_seconds()
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
        self.done += 1
        self.failed += record.status == "failed"
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=1, failed=self.failed)
        elif self.lines:
            self._maybe_line()

    def _maybe_line(self) -> None:
        now = time.monotonic()
        finished = self.done == self.total
        if now - self._started < self._interval and not (finished and self._printed):
            return  # a short run (a training step) stays quiet
        step = max(1, -(-self.total // 10))  # a tenth of the groups, rounded up
        if not finished and (self.done % step or now - self._last_line < self._interval):
            return
        self._last_line = now
        self._printed = True
        print(
            f"groups {self.done}/{self.total} done, {self.failed} failed, "
            f"{now - self._started:.0f} s",
            file=sys.stderr,
            flush=True,
        )

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def _progress_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get(PROGRESS_SECONDS_VAR, "10")))
    except ValueError:
        return 10.0


def summarize(records: Sequence[GroupRecord]) -> dict[str, Any]:
    """Counts and means over records: what the CLI's summary table and JSON line show.

    Rewards are total rewards (step rewards plus group reward) of the trajectories
    of ``ok`` groups; failed groups count in ``failed`` only. ``reward_std`` is the
    spread over all trajectories; ``zero_advantage_share`` is the share of ok groups
    whose trajectories all got the same reward: they carry no learning signal for
    group-relative estimators, which is the first thing to look at in a new run.
    A statistic with nothing to be computed from (a mean over no trajectory) is
    ``None``, not 0: a run where every group failed did not score zero.
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
    mean = sum(rewards) / len(rewards) if rewards else None
    spread = (
        (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5 if mean is not None else None
    )
    return {
        "groups": len(records),
        "ok": len(ok),
        "failed": sum(1 for r in records if r.status == "failed"),
        "trajectories": len(rewards),
        "mean_reward": mean,
        "reward_std": spread,
        "zero_advantage_share": constant / len(ok) if ok else None,
        "mean_turns": sum(turns) / len(turns) if turns else None,
        "tokens_sampled": sampled,
        "retried_groups": sum(1 for r in records if r.attempts > 1),
        "stop_reasons": dict(sorted(stop_reasons.items())),
    }
