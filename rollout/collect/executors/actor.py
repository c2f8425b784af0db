"""The episode host: a Ray async actor that runs many groups' episodes at once.

One actor per node (by default) keeps the heavy state of the environments where
they run: ALFWorld engine pools, sandbox pools and retriever clients are
process-wide caches, so they are built once in the actor and shared by every
group it runs. Each group runs the collector's own attempt loop (retries with
fresh envs, timeouts) here; only the finished group travels back, packed.

A run's builders and policy reach the actor as one object-store entry each,
deserialized once per actor and run (:meth:`EpisodeHost._session`), not once per
group: a builder holds its tokenizer, about 50 kB pickled.

A policy built from a :class:`PolicySpec` (a server's client) is built once per
actor and kept across runs (its connection pool with it). The weights it samples
with come from the driver: a weight sync moves the driver's policy to a new
:class:`~agentenvs.envs.weights_identity.WeightsIdentity`, the next group to
start ships that identity (:class:`ShippedWeights`), and the actor's client takes
it before that group's first turn, so it asks for the new adapter by name and
stamps the new version (the actor's other episodes switch with it at their next
turn, as in process). Identities are numbered by the driver and a client only
moves forward: a late retry of a group shipped before the sync cannot move it back.

Shipping the identity per group is enough for a LoRA sync (requests name the
adapter they want), not for a full in-place reload: the actors' requests must also
stop while the server's weights change. So the clients an actor builds share one
:class:`SwapGate` of the actor's, which the driver's sync closes through
:meth:`EpisodeHost.close_gate` (drained: nothing in flight here) and opens through
:meth:`EpisodeHost.open_gate`, handing over the verified identity first
(:mod:`.remote_gate`). A request costs no Ray call for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from agentenvs.envs.weights_identity import WeightsIdentity
from agentenvs.rollout.collect.executors.bridge import BridgedPolicy
from agentenvs.rollout.collect.executors.spec import PolicySpec
from agentenvs.rollout.collect.executors.wire import pack_group, ship
from agentenvs.rollout.policies.base import GatedPolicy, TracksWeights, VersionedPolicy, is_per_env
from agentenvs.rollout.weights.gate import SwapGate

_KEPT_SESSIONS = 16
"""Decoded runs (builders, policies) an actor keeps: a streaming collection opens many."""


@dataclass(frozen=True)
class ShippedWeights:
    """The driver policy's weights when a group started, and their place in the order
    the driver saw them (``serial``: higher is newer)."""

    identity: WeightsIdentity
    serial: int


@dataclass(frozen=True)
class ShippedPolicy:
    """How the driver hands its policy to actors (see :func:`policy_payload`)."""

    kind: str
    """``spec`` (build from a :class:`PolicySpec`), ``copy`` (a picklable per-env
    factory such as the scripted policy) or ``bridge`` (call back to the driver)."""
    value: Any
    weights: ShippedWeights | None = None
    """``spec`` only: what the actor's client must sample with (None: what it was built with)."""


def driver_weights(policy: Any) -> WeightsIdentity | None:
    """The weights a driver-side policy says it samples with, if it tracks them."""
    if isinstance(policy, TracksWeights) and isinstance(policy.weights, WeightsIdentity):
        return policy.weights
    return None


def has_swap_gate(policy: Any) -> bool:
    """Whether ``policy`` is a :class:`GatedPolicy` whose gate is a :class:`SwapGate`
    (one an actor can replace with its own, and a driver's sync can link to)."""
    return isinstance(policy, GatedPolicy) and isinstance(policy.gate, SwapGate)


def policy_payload(
    policy: Any, spec: PolicySpec | None, mailbox: Any, weights: ShippedWeights | None = None
) -> ShippedPolicy:
    if spec is not None:
        return ShippedPolicy("spec", spec, weights)
    if is_per_env(policy):
        return ShippedPolicy("copy", policy)  # it needs the env, so it goes where the env is
    return ShippedPolicy("bridge", mailbox)


@dataclass
class BuiltClient:
    """A policy an actor built from a spec, and the serial of the weights it holds."""

    spec: PolicySpec
    policy: Any
    serial: int = -1

    def adopt(self, weights: ShippedWeights | None) -> None:
        if weights is not None:
            self.take(weights.identity, weights.serial)

    def take(self, identity: WeightsIdentity, serial: int) -> None:
        """Move to ``identity`` if it is newer than what the client holds."""
        if serial <= self.serial:
            return
        if isinstance(self.policy, TracksWeights):
            self.policy.weights = identity
        self.serial = serial


class EpisodeHost:
    def __init__(self) -> None:
        self._sessions: OrderedDict[str, asyncio.Task] = OrderedDict()
        self._clients: list[BuiltClient] = []
        self._gate = SwapGate()
        """Shared by every client built here: what a driver's weight sync closes."""
        self._holding: tuple[asyncio.Task, asyncio.Future] | None = None
        self._reopen = asyncio.Event()

    async def where(self) -> dict[str, Any]:
        """Answered once the actor is up: proof that it was placed, and where."""
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    async def run_group(
        self, refs: list[Any], index: int, key: str, retries: int, group_timeout: float | None
    ) -> bytes:
        """The finished group's outcome, pickled here as one blob (:func:`.wire.ship`)."""
        from agentenvs.rollout.collect.attempts import run_group_attempts
        from agentenvs.rollout.collect.provenance import policy_provenance

        builders, policy, described = await self._session(refs)
        record = await run_group_attempts(
            builders[index], policy, key, retries=retries, group_timeout=group_timeout
        )
        return ship(
            {
                "group": None if record.group is None else pack_group(record.group),
                "status": record.status,
                "error": record.error,
                "traceback": record.traceback,
                "attempts": record.attempts,
                # Fingerprinted here, where the group was made: the driver need not redo it
                # (it cost the driver ~0.3 ms per group, a third of its work per group).
                "collected": record.collected,
                "policy": policy_provenance(policy) if described else None,
                **(await self.where()),
            }
        )

    async def _session(self, refs: list[Any]) -> tuple[list[Any], Any, bool]:
        """The run's builders and the policy, each decoded once per actor."""
        builders_ref, policy_ref = refs
        builders = await self._decoded(builders_ref, _as_is)
        policy, described = await self._decoded(policy_ref, self._usable_policy)
        return builders, policy, described

    def _usable_policy(self, shipped: ShippedPolicy) -> tuple[Any, bool]:
        """The policy episodes call, and whether its provenance must be reported back."""
        if shipped.kind == "spec":
            client = self._client(shipped.value)
            client.adopt(shipped.weights)
            return client.policy, True
        if shipped.kind == "copy":
            return shipped.value, False
        return BridgedPolicy(shipped.value), False

    def _client(self, spec: PolicySpec) -> BuiltClient:
        """The actor's one client for ``spec``, built on first use."""
        for built in self._clients:
            if built.spec == spec:
                return built
        built = BuiltClient(spec, spec.build())
        if has_swap_gate(built.policy):
            built.policy.gate = self._gate
        self._clients.append(built)
        return built

    # ---- the driver's weight swaps (see .remote_gate) ---------------------------------
    async def close_gate(self) -> int:
        """Hold new requests of this actor's clients and wait for those in flight;
        how many were in flight. Held until :meth:`open_gate`."""
        if self._holding is not None:
            raise RuntimeError("this actor's gate is already closed: one swap at a time")
        in_flight = self._gate.in_flight
        loop = asyncio.get_running_loop()
        drained = loop.create_future()
        self._reopen = asyncio.Event()
        self._holding = (loop.create_task(self._hold(drained)), drained)
        await drained
        return in_flight

    async def _hold(self, drained: asyncio.Future) -> None:
        try:
            async with self._gate.swap():
                drained.set_result(None)
                await self._reopen.wait()
        except asyncio.CancelledError:  # opened again before it drained (a drain timeout)
            drained.cancel()
            raise

    async def open_gate(self, identity: WeightsIdentity | None, serial: int) -> None:
        """Take the swap's identity, then let requests in: each is stamped with it."""
        if identity is not None:
            for client in self._clients:
                client.take(identity, serial)
        holding, self._holding = self._holding, None
        if holding is None:
            return
        task, drained = holding
        self._reopen.set()
        if not drained.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def gate_state(self) -> dict[str, Any]:
        """For tests and for diagnosing a stuck swap."""
        return {
            "closed": self._holding is not None,
            "in_flight": self._gate.in_flight,
            "versions": [
                c.policy.weights_version if isinstance(c.policy, VersionedPolicy) else None
                for c in self._clients
            ],
        }

    async def _decoded(self, ref: Any, decode: Any) -> Any:
        """``decode(await ref)``, shared by concurrent groups and kept for later runs."""
        name = ref.hex()
        task = self._sessions.get(name)
        if task is None:

            async def fetch() -> Any:
                return decode(await ref)

            task = asyncio.get_running_loop().create_task(fetch())
            self._sessions[name] = task
            while len(self._sessions) > _KEPT_SESSIONS:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(name)
        return await task


def _as_is(value: Any) -> Any:
    return value
