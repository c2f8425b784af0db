"""A swap gate that spans Ray actors, so a full reload holds every client's requests.

In process, a :class:`~agentenvs.rollout.weights.gate.SwapGate` keeps a weight swap
and sampling requests apart: the swap waits for requests in flight and holds new
ones until the new weights are verified. Inside Ray actors each actor's client is
in its own process, out of the driver gate's sight. Without more, a full in-place
reload would run while actors still sample, and a turn served by the new (or
half-loaded) weights would be stamped with the old version.

The gate is pushed to the actors rather than asked by every request, so a turn
costs no Ray call at all:

* every episode actor gives the clients it builds from a spec one local
  ``SwapGate`` of its own (:class:`~.actor.EpisodeHost`), which requests enter as
  in process;
* :class:`ActorsGate`, linked to the driver policy's gate (:meth:`SwapGate.link`),
  is what a :class:`~agentenvs.rollout.weights.sync.WeightSync` closes after its own:
  it stops the executor from starting groups, then closes every live actor's gate
  at once and waits until each has drained (nothing in flight there); opening hands
  each actor the identity the swap ended on, which its clients take *before* their
  gate opens, so a request admitted after opening is stamped with it, atomically
  (one event loop per actor).

An actor that dies while closing had its requests die with it: it counts as
drained. A drain that does not finish within ``drain_timeout`` opens every actor
again and raises :class:`GateDrainTimeout` naming the nodes still draining; the
swap is not made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.weights_identity import WeightsIdentity

DRAIN_TIMEOUT = 900.0
"""Seconds a drain waits for requests in flight: above a client's request timeout
times its attempts with backoff (120 s x 4 by default), so only a stuck request hits it."""


class GateDrainTimeout(AgentEnvsError, RuntimeError):
    """Requests still in flight on some actors after the drain timeout."""


class ActorsGate:
    """The driver's gate over an executor's episode actors (see the module docstring).

    ``hosts()`` lists the executor's actors (``Host`` objects of its pools);
    ``next_serial()`` numbers identities in the order shipped weights use, so an
    actor's client can tell which of two identities it was given is newer.
    """

    def __init__(
        self,
        hosts: Callable[[], Sequence[Any]],
        next_serial: Callable[[], int],
        drain_timeout: float = DRAIN_TIMEOUT,
    ) -> None:
        self.hosts = hosts
        self.next_serial = next_serial
        self.drain_timeout = drain_timeout
        self._open = asyncio.Event()
        self._open.set()
        self._closed: list[Any] = []
        self.swaps = 0
        self.drained_last: int | None = None
        """Requests that were in flight on the actors when the last swap closed them."""

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    async def wait_open(self) -> None:
        """Before a group is sent to an actor: none starts while a swap is under way."""
        await self._open.wait()

    async def close(self) -> None:
        self._open.clear()  # first: an actor that becomes ready now gets no group
        hosts = [host for host in self.hosts() if host.ready]
        calls = {host: asyncio.ensure_future(host.handle.close_gate.remote()) for host in hosts}
        try:
            self.drained_last = await self._drained(calls)
        except BaseException:
            self._closed = hosts  # open every actor again, those still draining included
            await self.open(None)
            raise
        self._closed = hosts

    async def _drained(self, calls: dict[Any, asyncio.Future]) -> int:
        """Requests the actors had in flight when closed; raises if some never drained."""
        import ray

        done, pending = await asyncio.wait(calls.values(), timeout=self.drain_timeout)
        for call in pending:  # they end when reopened (cancelled): nothing to report
            call.add_done_callback(_consume)
        if pending:
            nodes = sorted({(h.node_id or "?")[:12] for h, c in calls.items() if c in pending})
            raise GateDrainTimeout(
                f"{len(pending)} Ray actors (nodes {', '.join(nodes)}) still had sampling "
                f"requests in flight after {self.drain_timeout:g}s; the swap was not made"
            )
        drained = 0
        for call in done:
            error = call.exception()
            if error is None:
                drained += call.result()
            elif not isinstance(error, ray.exceptions.RayActorError):
                raise error  # our own code failed (a dead actor counts as drained)
        return drained

    async def open(self, identity: WeightsIdentity | None) -> None:
        import ray

        serial = self.next_serial()
        closed, self._closed = self._closed, []
        calls = [host.handle.open_gate.remote(identity, serial) for host in closed]
        try:
            outcomes = await asyncio.gather(*calls, return_exceptions=True)
        finally:
            self.swaps += 1
            self._open.set()
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(
                outcome,
                ray.exceptions.RayError,  # a dead actor has nothing to open
            ):
                raise outcome


def _consume(call: asyncio.Future) -> None:
    if not call.cancelled():
        call.exception()
