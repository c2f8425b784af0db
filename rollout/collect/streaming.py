"""Streaming collection for asynchronous RL: finished groups while collection goes on.

A synchronous loop samples a whole batch, then trains, and the engine idles while
the trainer works. Here groups are handed to the trainer one by one as they
finish, while later groups still roll out (and weights may change under them), so
a trainer can train on early groups at once.

The price of asynchrony is staleness: a group may have been sampled by weights
older than the trainer's current ones. With ``max_staleness=k``, a group whose
oldest turn came from a version older than ``current - k`` is never handed over:
it is re-queued (collected again with fresh envs, under the current weights) or
dropped, and counted either way (:class:`StreamStats`). Staleness is judged at
hand-over, the latest moment: the trainer may have moved on while a finished
group waited.

Each group runs through :func:`~agentenvs.rollout.collect.collector.collect`, so
retries, timeouts, provenance and advantages are the collector's own. The store
receives a group when it is handed over (a stale group is not kept as ``ok``, so
a resume collects it again) and a failed group when it fails. A rerun with the
same store resumes as the collector does (``run_identity.keys_to_skip``): it skips
this run's ok groups and refuses a store whose latest run is a different one
(``new_run=True`` appends a new run instead).

The store is written with :meth:`~.store.TrajectoryStore.commit`: the ``fsync`` runs
off the event loop (the running groups go on meanwhile), and a group is handed over
only once it is on disk.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from agentenvs.envs.types import EnvGroupBuilder
from agentenvs.rollout.collect.collector import collect, warn_if_all_skipped
from agentenvs.rollout.collect.executors import GroupExecutor
from agentenvs.rollout.collect.options import CollectOptions
from agentenvs.rollout.collect.plan import plan_collection
from agentenvs.rollout.collect.provenance import ProvenanceNotes
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.collect.store_lock import StoreClaim
from agentenvs.rollout.policies.base import Policy, PolicyFactory, VersionedPolicy

OnStale = Literal["requeue", "drop"]


@dataclass
class StreamStats:
    handed: int = 0
    """Groups given to the consumer (and stored)."""
    skipped: int = 0
    """Groups the store already held."""
    failed: int = 0
    requeued_stale: int = 0
    dropped_stale: int = 0
    staleness: Counter[int] = field(default_factory=Counter)
    """Versions behind current, of the handed-over groups."""

    @property
    def max_staleness_seen(self) -> int:
        return max(self.staleness, default=0)


@dataclass
class _Item:
    index: int
    key: str
    builder: EnvGroupBuilder
    requeues: int = 0


def record_version(record: GroupRecord) -> Any:
    """The version staleness is judged by: the oldest that sampled any of its turns."""
    return record.sampled_by().version


def _declared_version(policy: object) -> Any:
    """The version a :class:`VersionedPolicy` says it samples with now (None: unknown)."""
    return policy.weights_version if isinstance(policy, VersionedPolicy) else None


@dataclass(frozen=True)
class Staleness:
    """How stale a group may be when it is handed over, and what happens to one that is
    too stale (see the module docstring)."""

    max_staleness: int | None = None
    """Versions behind current a handed-over group may be (None: any)."""
    on_stale: OnStale = "requeue"
    """``requeue`` (collect it again under the current weights) or ``drop``."""
    max_requeues: int = 2
    """Requeues of one group before it is dropped."""

    def __post_init__(self) -> None:
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError(f"max_staleness must be 0 or more, got {self.max_staleness}")
        if self.on_stale not in ("requeue", "drop"):
            raise ValueError(f"on_stale must be 'requeue' or 'drop', got {self.on_stale!r}")


class StreamingCollection:
    """``async for record in StreamingCollection(...)``: ok groups as they finish.

    ``options`` are the collector's (:class:`~.options.CollectOptions`; its progress
    bar is off here: groups are handed over one by one). ``staleness`` says how
    stale a handed-over group may be; ``current_version`` what the trainer's weights
    are now (default: the policy's ``weights_version``). ``executor`` and ``notes``
    go to ``collect``.
    """

    def __init__(
        self,
        builders: Sequence[EnvGroupBuilder],
        policy: Policy | PolicyFactory,
        options: CollectOptions | None = None,
        *,
        store: TrajectoryStore | None = None,
        keys: Sequence[str] | None = None,
        staleness: Staleness | None = None,
        current_version: Callable[[], Any] | None = None,
        executor: GroupExecutor | None = None,
        notes: ProvenanceNotes | None = None,
    ) -> None:
        options = options or CollectOptions()
        staleness = staleness or Staleness()
        self.policy = policy
        self.concurrency = options.concurrency
        self.store = store
        self.max_staleness = staleness.max_staleness
        self.on_stale: OnStale = staleness.on_stale
        self.max_requeues = staleness.max_requeues
        self.current_version = current_version or (lambda: _declared_version(policy))
        # Each group runs through collect() without the store (it is stored at hand-over)
        # and without new_run (decided once, below, for the whole stream).
        self.options = replace(options, progress=False, new_run=False)
        self.executor = executor
        self.notes = notes
        # Owned from here to the end of the iteration, as collect() owns its store.
        self._claim = StoreClaim(store.path) if store is not None else None
        # The collector's plan: keys, and its resume rule (this run's ok groups are
        # skipped; a store whose latest run is another one is refused).
        try:
            plan = plan_collection(
                builders, policy, keys=keys, store=store, new_run=options.new_run
            )
        except BaseException:
            self.release()
            raise
        warn_if_all_skipped(plan.skipped, len(plan.groups), store)
        self._items = [_Item(g.index, g.key, g.builder) for g in plan.groups]
        self.stats = StreamStats(skipped=plan.skipped)
        self.failed: list[GroupRecord] = []

    def release(self) -> None:
        """Let go of the store (done when the iteration ends; for a stream dropped
        before it is iterated to the end)."""
        if self._claim is not None:
            self._claim.release()

    def staleness(self, record: GroupRecord) -> int | None:
        version, current = record_version(record), self.current_version()
        if version is None or current is None:
            return None
        return int(current) - int(version)

    def _too_stale(self, record: GroupRecord) -> bool:
        if self.max_staleness is None:
            return False
        behind = self.staleness(record)
        if behind is None:  # an unversioned group cannot be judged: refuse it
            return True
        return behind > self.max_staleness

    def _handle_stale(self, item: _Item, work: asyncio.Queue) -> bool:
        """Re-queue or drop a stale group; True when it is resolved (dropped)."""
        if self.on_stale == "requeue" and item.requeues < self.max_requeues:
            self.stats.requeued_stale += 1
            work.put_nowait(_Item(item.index, item.key, item.builder, item.requeues + 1))
            return False
        self.stats.dropped_stale += 1
        return True

    async def _run(self, item: _Item) -> GroupRecord:
        result = await collect(
            [item.builder],
            self.policy,
            self.options,
            keys=[item.key],
            executor=self.executor,
            notes=self.notes,
        )
        record = result.records[0]
        if record.status == "ok":
            record.extra["requeues"] = item.requeues
        return record

    def __aiter__(self) -> AsyncIterator[GroupRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[GroupRecord]:
        work: asyncio.Queue[_Item | None] = asyncio.Queue()
        finished: asyncio.Queue[tuple[_Item, GroupRecord | BaseException]] = asyncio.Queue(
            maxsize=self.concurrency
        )
        for item in self._items:
            work.put_nowait(item)
        pending = len(self._items)

        async def worker() -> None:
            while (item := await work.get()) is not None:
                try:
                    outcome: GroupRecord | BaseException = await self._run(item)
                except Exception as err:  # a bug or a store error: the consumer raises it
                    outcome = err
                await finished.put((item, outcome))

        workers = [asyncio.create_task(worker()) for _ in range(self.concurrency)]
        try:
            while pending:
                item, outcome = await finished.get()
                if isinstance(outcome, BaseException):
                    raise outcome
                record = outcome
                if record.status != "ok":
                    self.stats.failed += 1
                    self.failed.append(record)
                    if self.store is not None:
                        await self.store.commit(record)  # on disk; workers run meanwhile
                    pending -= 1
                    continue
                if self._too_stale(record):
                    pending -= self._handle_stale(item, work)
                    continue
                behind = self.staleness(record)
                if behind is not None:
                    self.stats.staleness[behind] += 1
                if self.store is not None:
                    await self.store.commit(record)  # stored before it is handed over
                self.stats.handed += 1
                pending -= 1
                yield record  # the consumer may train and sync here before the next one
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            self.release()


async def collect_streaming(
    builders: Sequence[EnvGroupBuilder],
    policy: Policy | PolicyFactory,
    options: CollectOptions | None = None,
    **streaming: Any,
) -> tuple[list[GroupRecord], StreamStats]:
    """Drain a :class:`StreamingCollection` (``streaming``: its keyword arguments):
    every handed-over group, and the counts."""
    stream = StreamingCollection(builders, policy, options, **streaming)
    records = [record async for record in stream]
    return records, stream.stats
