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

from agentenvs.envs.types import EnvGroupBuilder, TrajectoryGroup
from agentenvs.rollout.collect.executors import GroupExecutor, InProcessExecutor
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.rollouts import current_group_key, do_group_rollout, first_error
from agentenvs.rollout.collect.run_identity import (
    RunIdentity,
    identity_for_collection,
    keys_to_skip,
)
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.collect.tree import attach_tree
from agentenvs.rollout.data.advantages import Estimator, estimator_info, group_advantages
from agentenvs.rollout.policies.base import Policy, PolicyFactory
from agentenvs.rollout.weights.stamps import with_turn_versions


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


def default_key(index: int, builder: EnvGroupBuilder) -> str:
    """``"<position>:<task id>"``: stable across reruns over the same builders."""
    return f"{index}:{_task_id(index, builder)}"


def _task_id(index: int, builder: EnvGroupBuilder) -> str:
    return str(getattr(builder, "task_id", index))


def _describe_error(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def policy_provenance(policy: object, group: TrajectoryGroup | None = None) -> dict[str, Any]:
    """What a policy says about itself (model, sampling settings) for the records.

    Asked when a group finishes, not before the first request: a model name found
    on the server is known by then. With ``group``, the weights version is the
    oldest its turns were stamped with (a sync may land mid-collection)."""
    describe = getattr(policy, "provenance", None)
    if callable(describe):
        described = dict(describe())
    elif isinstance(describe, dict):
        described = dict(describe)
    else:
        described = {"policy": type(policy).__name__}
    version = getattr(policy, "weights_version", None)
    if version is not None:
        described["weights_version"] = version
    return with_turn_versions(described, group)


_LIVE_POLICY_FIELDS = ("model", "weights_version", "weights_versions", "weights")
"""Known only once sampling has started (a model name found on the server, a sync)."""


def record_provenance(
    policy: object, group: TrajectoryGroup | None, provenance: dict | None
) -> dict[str, Any]:
    """A finished group's provenance: the caller's, with the policy's live fields.

    A caller's ``policy`` section (the CLI builds one before collecting) keeps its
    shape, but its model and weights fields are refreshed from the policy as it
    is now, so a model discovered from the server is not recorded as null.
    """
    live = policy_provenance(policy, group)
    record = {"policy": live, **(provenance or {})}
    given = record["policy"]
    if given is not live and isinstance(given, dict):
        given = dict(given)
        given.update({k: live[k] for k in _LIVE_POLICY_FIELDS if live.get(k) is not None})
        record["policy"] = given
    return record


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
    fresh envs (``do_group_rollout`` cleans up and makes new ones) up to
    ``retries`` more times, then recorded as failed. Keys already stored as ``ok``
    are skipped. Errors of the store itself (a full disk) stop the run: carrying on
    would lose data. Each ok record carries its group's advantages under
    ``extra["advantages"]`` with the estimator that made them, so the stored data
    says how its loss inputs were computed.

    Each record also carries the run's identity (env, config hash, split,
    tokenizer, policy, group size). Resuming into a store whose latest run is a
    different one raises :class:`RunMismatchError` saying what differs, unless
    ``new_run`` asks to append a new run to the file.

    ``executor`` says where episodes run: in this process (the default) or in Ray
    actors (:class:`~agentenvs.rollout.collect.executors.ray_executor.RayExecutor`);
    records, store and resume are the same either way.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if retries < 0:
        raise ValueError(f"retries must be 0 or more, got {retries}")
    if group_timeout is not None and group_timeout <= 0:
        raise ValueError(f"group_timeout must be positive, got {group_timeout}")
    if keys is None:
        keys = [default_key(i, b) for i, b in enumerate(builders)]
    elif len(keys) != len(builders):
        raise ValueError(f"{len(keys)} keys for {len(builders)} builders")
    duplicates = [k for k, n in Counter(keys).items() if n > 1]
    if duplicates:
        raise ValueError(f"group keys must be unique; repeated: {duplicates[:5]}")

    identity = collection_identity(
        builders, policy, env_name=env_name, env_config=env_config, provenance=provenance
    )
    run = identity.to_json()
    done: set[str] = set()
    if store is not None:
        done = keys_to_skip(store.path, store.resume_facts(), identity, new_run=new_run)
    todo = [(i, k, b) for i, (k, b) in enumerate(zip(keys, builders, strict=True)) if k not in done]
    result = CollectionResult(skipped=len(builders) - len(todo))
    semaphore = asyncio.Semaphore(concurrency)
    runner = await (executor or InProcessExecutor()).start(policy, [b for _, _, b in todo])
    estimator = estimator_info(advantage_estimator, normalize_std=normalize_std)

    with _ProgressBar(len(todo), enabled=progress) as bar:

        async def run_one(index: int, key: str, builder: EnvGroupBuilder) -> None:
            async with semaphore:
                record = await runner.run_group(
                    builder, key, retries=retries, group_timeout=group_timeout
                )
            record.task_id = _task_id(index, builder)
            record.env = env_name or _env_name(builder)
            record.env_config = dict(env_config) if env_config is not None else _config(builder)
            described = runner.described_policy(record, policy)
            record.provenance = record_provenance(described, record.group, provenance)
            record.run = dict(run)
            attach_tree(record.extra, record.group)
            if record.group is not None:
                record.extra["advantages"] = group_advantages(
                    record.group.total_rewards(), advantage_estimator, normalize_std=normalize_std
                )
                record.extra["advantage_estimator"] = estimator
            if store is not None:
                store.append(record)
            result.records.append(record)
            bar.advance(record)

        try:
            async with asyncio.TaskGroup() as group:
                for index, key, builder in todo:
                    group.create_task(run_one(index, key, builder))
        except BaseExceptionGroup as errors:  # only store failures get here
            raise first_error(errors) from None
        finally:
            await runner.close()
    return result


def collection_identity(
    builders: Sequence[EnvGroupBuilder],
    policy: Policy | PolicyFactory,
    *,
    env_name: str = "",
    env_config: dict | None = None,
    provenance: dict | None = None,
) -> RunIdentity:
    """The run identity :func:`collect` stamps on its records and resumes by, from its
    arguments (shared with streaming collection, which stores records itself)."""
    first = builders[0] if builders else None
    return identity_for_collection(
        builders,
        env_name=env_name or _env_name(first),
        env_config=dict(env_config) if env_config is not None else _config(first),
        provenance=provenance,
        described_policy=policy_provenance(policy),
    )


async def _run_group(
    builder: EnvGroupBuilder,
    policy: Policy | PolicyFactory,
    key: str,
    retries: int,
    group_timeout: float | None,
) -> GroupRecord:
    token = current_group_key.set(key)
    errors: list[str] = []
    try:
        for attempt in range(1, retries + 2):
            try:
                async with asyncio.timeout(group_timeout) as deadline:
                    group = await do_group_rollout(builder, policy)
            except TimeoutError as err:
                if deadline.expired():
                    errors.append(f"TimeoutError: group took longer than {group_timeout:g}s")
                else:
                    errors.append(_describe_error(err))
            except Exception as err:
                errors.append(_describe_error(err))
            else:
                return GroupRecord(key=key, env="", task_id="", group=group, attempts=attempt)
    finally:
        current_group_key.reset(token)
    attempts = len(errors)
    history = "; ".join(f"attempt {n}: {e}" for n, e in enumerate(errors, start=1))
    message = f"failed after {attempts} attempt{'s' if attempts > 1 else ''}: {history}"
    return GroupRecord(
        key=key, env="", task_id="", group=None, status="failed", error=message, attempts=attempts
    )


def _env_name(builder: EnvGroupBuilder | None) -> str:
    config = getattr(builder, "config", None)
    return str(getattr(config, "env_name", "") or "")


def _config(builder: EnvGroupBuilder | None) -> dict[str, Any]:
    config = getattr(builder, "config", None)
    dump = getattr(config, "model_dump", None)
    return dict(dump(mode="json")) if callable(dump) else {}


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
