"""The Ray executor: groups run in async Ray actors on a cluster, the driver keeps the store.

The collector is unchanged: it still decides which groups run, bounds how many
are in flight, and appends each finished group's record to the store as it
arrives, so a killed driver resumes from the store exactly as in process. What
moves is where episodes run: :class:`~agentenvs.rollout.collect.executors.actor.EpisodeHost`
actors, each running many groups concurrently on its own event loop.

Policies (see :func:`~agentenvs.rollout.collect.executors.actor.policy_payload`):

* with ``policy_spec`` (a network client such as the OpenAI-compatible policy),
  each actor builds its own client and samples directly; the driver's copy
  describes the run and says which weights to sample with: each run ships the
  driver policy's current ``weights`` identity, so after a weight sync in the
  driver the actors' clients sample the new adapter and stamp the new version;
  and a gate that spans the actors (:meth:`RayExecutor.gate_for`, linked to the
  driver policy's swap gate) holds their requests while a sync swaps the weights,
  so a full in-place reload mid-collection is as safe as in process;
* a per-env factory (scripted, replay) is copied to the actors, next to its envs;
* any other policy (a model in the driver) stays in the driver, and actors call
  back to it through a mailbox (:mod:`.bridge`).

Placement, the documented default: one actor per live node that can host one
(``num_actors``), each reserving no CPU (``num_cpus=0``: an episode host mostly
waits on its policy and on the env's own worker processes, and a reservation
would keep a second placement, ALFWorld's say, off a busy node) and, when some
node offers a custom resource named after the environment (``{"alfworld": N}``),
one unit of it, so ALFWorld episodes run only where ALFWorld is set up; a node
offering ``{"alfworld": N}`` hosts up to N such actors. ``resources=``
replaces the custom part; ``{}`` asks for none.

Faults: an actor or node that dies mid-group costs the group one *lost attempt*
(recorded in ``extra["lost_attempts"]`` and counted in ``attempts``); the group
runs again on a live actor, which decodes fresh builders, so fresh envs. After
``lost_retries`` losses the group is recorded failed. A group that cannot get an
actor placed within ``placement_timeout`` seconds is recorded failed with a
:class:`~agentenvs.rollout.collect.executors.actor_pool.PlacementError`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from agentenvs.envs.types import EnvGroupBuilder
from agentenvs.rollout.collect.executors.actor import (
    EpisodeHost,
    ShippedWeights,
    driver_weights,
    has_swap_gate,
    policy_payload,
)
from agentenvs.rollout.collect.executors.actor_pool import (
    ActorPool,
    Placement,
    PlacementError,
    live_nodes,
)
from agentenvs.rollout.collect.executors.base import GroupExecutor, GroupRunner
from agentenvs.rollout.collect.executors.bridge import DriverPump
from agentenvs.rollout.collect.executors.ray_address import describe_connection, keep_loopback
from agentenvs.rollout.collect.executors.ray_address import resolve as resolve_address
from agentenvs.rollout.collect.executors.remote_gate import ActorsGate
from agentenvs.rollout.collect.executors.spec import PolicySpec
from agentenvs.rollout.collect.executors.wire import landed, unpack_group
from agentenvs.rollout.collect.options import check_at_least, check_positive
from agentenvs.rollout.collect.provenance import ReportedProvenance
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.policies.base import Policy, PolicyFactory, is_per_env

logger = logging.getLogger(__name__)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("the Ray executor needs Ray: pip install 'agentenvs[ray]'") from None
    return ray


class RayExecutor(GroupExecutor):
    """Run groups in Ray actors. Use as ``async with RayExecutor(...) as executor``.

    ``address``: None uses the Ray already initialized in this process, else
    starts a local Ray of its own for the executor's lifetime (stopped by
    :meth:`close`), never ``RAY_ADDRESS`` or the last ``ray start`` cluster;
    ``"auto"`` or ``"HOST:PORT"`` joins an existing cluster, checked to answer
    first (:mod:`.ray_address`: a bad address is one :class:`RayAddressError`
    within seconds, a loopback one works as given). ``announce`` is called with
    one line saying which Ray the executor uses (the CLI prints it to stderr).
    """

    name = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        num_actors: int | None = None,
        num_cpus: float = 0.0,
        resources: dict[str, float] | None = None,
        policy_spec: PolicySpec | None = None,
        placement_timeout: float = 60.0,
        lost_retries: int = 2,
        init_options: dict[str, Any] | None = None,
        announce: Callable[[str], None] | None = None,
    ) -> None:
        if num_actors is not None:
            check_at_least("num_actors", num_actors, 1)
        check_positive("placement_timeout", placement_timeout)
        check_at_least("lost_retries", lost_retries, 0)
        self.address = address
        self.num_actors = num_actors
        self.num_cpus = num_cpus
        self.resources = resources
        self.policy_spec = policy_spec
        self.placement_timeout = placement_timeout
        self.lost_retries = lost_retries
        self.init_options = dict(init_options or {})
        self.announce = announce
        self.joined: str | None = None
        """The line saying which Ray this executor uses, once connected."""
        self.placements: dict[str, str] = {}
        """Group key -> id of the Ray node its (last) attempt ran on."""
        self._owns_ray = False
        self._pools: dict[str, ActorPool] = {}
        self._policies: dict[int, tuple[Any, Any, Any]] = {}  # id -> (policy, weights, ref)
        self._weights_serial = 0
        self._pumps: dict[int, DriverPump] = {}
        self._gates: dict[int, tuple[Any, ActorsGate]] = {}  # id -> (policy, gate)

    # ---- life cycle ------------------------------------------------------------------
    def connect(self) -> None:
        """Join (or start) Ray; idempotent."""
        ray = _ray()
        if ray.is_initialized():
            if self.joined is None:
                self._say(describe_connection("reused"))
            return
        options = {"include_dashboard": False, "log_to_driver": False, **self.init_options}
        if self.address is None:
            with _without_env("RAY_ADDRESS"):  # a run of its own, whatever the shell says
                ray.init(address="local", **options)
            how = "started"
        else:
            target = resolve_address(self.address)
            keep_loopback(target)
            ray.init(address=target.address, **options)
            how = "joined"
        self._owns_ray = True
        self._say(describe_connection(how))

    def _say(self, line: str) -> None:
        self.joined = line
        logger.info("%s", line)
        if self.announce is not None:
            self.announce(line)

    async def close(self) -> None:
        for pump in self._pumps.values():
            await pump.close()
        for pool in self._pools.values():
            await pool.close()
        for policy, gate in self._gates.values():
            policy.gate.unlink(gate)
        self._gates.clear()
        self._pumps.clear()
        self._pools.clear()
        self._policies.clear()
        if self._owns_ray:
            _ray().shutdown()
            self._owns_ray = False

    async def __aenter__(self) -> RayExecutor:
        self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- runs ------------------------------------------------------------------------
    async def start(
        self, policy: Policy | PolicyFactory, builders: Sequence[EnvGroupBuilder]
    ) -> GroupRunner:
        self.connect()
        ray = _ray()
        placement = self.placement_for(builders)
        pool = self._pools.get(placement.describe())
        if pool is None:
            pool = ActorPool(
                ray.remote(EpisodeHost), placement, self.num_actors, self.placement_timeout
            )
            self._pools[placement.describe()] = pool
        try:
            builders_ref = ray.put(list(builders))
        except Exception as err:
            raise TypeError(
                f"the group builders cannot be sent to Ray actors ({type(err).__name__}: "
                f"{err}); builders must pickle (no open files, sockets or live envs)"
            ) from None
        self.policy_ref(policy)  # fails here, before any group, if it cannot be shipped
        return RayRunner(self, pool, builders_ref, policy, builders)

    def placement_for(self, builders: Sequence[EnvGroupBuilder]) -> Placement:
        """The documented default (see the module docstring), or what was asked for."""
        if self.resources is not None:
            return Placement(self.num_cpus, dict(self.resources))
        env = builders[0].describe().env_name if builders else ""
        offered = env and any(env in node for node in live_nodes())
        return Placement(self.num_cpus, {env: 1.0} if offered else {})

    def gate_for(self, policy: Any) -> ActorsGate | None:
        """The gate that spans this executor's actors for ``policy``, made on first use.

        Only a policy the actors build from ``policy_spec`` and that has a
        :class:`SwapGate` (the OpenAI-compatible client) gets one. It is linked to
        ``policy.gate``, so a :class:`~agentenvs.rollout.weights.sync.WeightSync` on
        the driver's policy closes it with its own, with nothing to pass; it is
        unlinked when the executor closes."""
        if self.policy_spec is None or not has_swap_gate(policy):
            return None
        known = self._gates.get(id(policy))
        if known is not None and known[0] is policy:
            return known[1]
        gate = ActorsGate(self._hosts, self._next_serial)
        policy.gate.link(gate)
        self._gates[id(policy)] = (policy, gate)
        return gate

    def _hosts(self) -> list[Any]:
        return [host for pool in self._pools.values() for host in pool.hosts]

    def _next_serial(self) -> int:
        self._weights_serial += 1
        return self._weights_serial

    def policy_ref(self, policy: Any) -> Any:
        """One object-store entry per policy, reused by every run (and actor cache),
        and a new one when the policy's weights changed (asked at each group's start)."""
        ray = _ray()
        weights = driver_weights(policy) if self.policy_spec is not None else None
        known = self._policies.get(id(policy))
        if known is not None and known[0] is policy and known[1] == weights:
            return known[2]
        shipped = None
        if weights is not None:  # new or changed (a sync): a new entry, a newer serial
            shipped = ShippedWeights(weights, self._next_serial())
        mailbox = None
        if self.policy_spec is None and not is_per_env(policy):
            pump = self._pumps.get(id(policy))
            if pump is None:
                pump = self._pumps[id(policy)] = DriverPump(policy)
            pump.start()
            mailbox = pump.mailbox
        self.gate_for(policy)  # before any group starts: a sync must find it linked
        try:
            ref = ray.put(policy_payload(policy, self.policy_spec, mailbox, shipped))
        except Exception as err:
            raise TypeError(
                f"the policy cannot be sent to Ray actors ({type(err).__name__}: {err}); "
                "pass policy_spec=PolicySpec(name, options) to build it in each actor"
            ) from None
        self._policies[id(policy)] = (policy, weights, ref)
        return ref


class RayRunner(GroupRunner):
    def __init__(
        self,
        executor: RayExecutor,
        pool: ActorPool,
        builders_ref: Any,
        policy: Any,
        builders: Sequence[EnvGroupBuilder],
    ) -> None:
        self.executor = executor
        self.pool = pool
        self.builders_ref = builders_ref
        self.policy = policy
        self.index = {id(b): i for i, b in enumerate(builders)}
        self._described: dict[str, dict[str, Any]] = {}

    async def run_group(
        self, builder: EnvGroupBuilder, key: str, *, retries: int, group_timeout: float | None
    ) -> GroupRecord:
        ray = _ray()
        index = self.index[id(builder)]
        gate = self.executor.gate_for(self.policy)
        lost: list[str] = []
        while True:
            try:
                host = await self.pool.acquire()
            except PlacementError as err:
                return _failed(key, f"PlacementError: {err}", lost, len(lost) + 1)
            try:
                # No group starts while a swap holds the actors (the gate closed only
                # the actors that were live then); nothing awaits between this and
                # the call below.
                while gate is not None and not gate.is_open:
                    await gate.wait_open()
                # The policy's entry is looked up per group: a sync since the last one
                # gives a new entry, and the group's actor samples with the new weights.
                refs = [self.builders_ref, self.executor.policy_ref(self.policy)]
                outcome = landed(
                    await host.handle.run_group.remote(refs, index, key, retries, group_timeout)
                )
            except ray.exceptions.RayTaskError as err:  # our actor code raised: not a loss
                return _failed(
                    key, f"{type(err).__name__}: {_first_line(err)}", lost, len(lost) + 1
                )
            except ray.exceptions.RayError as err:  # the actor, its node or the result is gone
                await self.pool.lost(host)
                node = (host.node_id or "?")[:12]
                lost.append(f"{type(err).__name__} on node {node}: {_first_line(err)}")
                if len(lost) > self.executor.lost_retries:
                    return _failed(key, "lost every actor it ran on", lost, len(lost))
                continue
            finally:
                self.pool.release(host)
            return self._record(key, outcome, lost)

    def _record(self, key: str, outcome: dict[str, Any], lost: list[str]) -> GroupRecord:
        group = None if outcome["group"] is None else unpack_group(outcome["group"])
        record = GroupRecord(
            key=key,
            env="",
            task_id="",
            group=group,
            status=outcome["status"],
            error=outcome["error"],
            attempts=outcome["attempts"] + len(lost),
            traceback=outcome["traceback"],
            collected=outcome.get("collected") if group is not None else None,
        )
        if lost:
            record.extra["lost_attempts"] = _numbered(lost)
        if outcome["policy"] is not None:
            self._described[key] = outcome["policy"]
        self.executor.placements[key] = outcome["node_id"]
        return record

    def described_policy(self, record: GroupRecord, policy: object) -> object:
        described = self._described.pop(record.key, None)
        return policy if described is None else ReportedProvenance(described)

    async def close(self) -> None:
        self.builders_ref = None  # the run's builders leave the object store with it


def _failed(key: str, reason: str, lost: list[str], attempts: int) -> GroupRecord:
    history = "; ".join(_numbered(lost))
    message = f"{reason}" + (f" (lost attempts: {history})" if lost else "")
    record = GroupRecord(
        key=key, env="", task_id="", group=None, status="failed", error=message,
        attempts=attempts,
    )  # fmt: skip
    if lost:
        record.extra["lost_attempts"] = _numbered(lost)
    return record


@contextlib.contextmanager
def _without_env(name: str) -> Iterator[None]:
    saved = os.environ.pop(name, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[name] = saved


def _numbered(lost: list[str]) -> list[str]:
    return [f"attempt {n}: {text}" for n, text in enumerate(lost, start=1)]


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else ""
