"""The episode actors of one placement, kept alive, replaced when lost.

Ray waits forever for an actor that no live node can host. The pool does not:
an actor that is not up within ``placement_timeout`` seconds is given up, and a
group waiting for an actor when that happens (with no other actor up) gets a
:class:`PlacementError` naming what was asked for and what the nodes offer,
which the runner records as the group's failure.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.errors import AgentEnvsError


class PlacementError(AgentEnvsError, RuntimeError):
    """No live Ray node can host an episode actor with the resources asked for."""


@dataclass(frozen=True)
class Placement:
    """What each episode actor asks Ray for."""

    num_cpus: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        asked = {"CPU": self.num_cpus, **self.resources} if self.num_cpus else self.resources
        return ", ".join(f"{k}={v:g}" for k, v in sorted(asked.items())) or "nothing"

    def fits(self, offered: dict[str, float]) -> int:
        """How many such actors a node offering ``offered`` resources can host."""
        asked = {"CPU": self.num_cpus, **self.resources}
        counts = [int(offered.get(k, 0.0) // v) for k, v in asked.items() if v > 0]
        return min(counts) if counts else 1


def live_nodes() -> list[dict[str, float]]:
    import ray

    return [dict(node["Resources"]) for node in ray.nodes() if node.get("Alive")]


def offered_summary() -> str:
    nodes = live_nodes()
    shown = [
        "{" + ", ".join(f"{k}={v:g}" for k, v in sorted(n.items()) if "node:" not in k) + "}"
        for n in nodes
    ]
    return f"{len(nodes)} live node(s): " + ("; ".join(shown) or "none")


@dataclass(eq=False)
class Host:
    """One actor and what the pool knows about it."""

    handle: Any
    ready: bool = False
    in_flight: int = 0
    node_id: str | None = None
    waiter: asyncio.Task | None = None


class ActorPool:
    def __init__(self, actor_class: Any, placement: Placement, size: int, timeout: float) -> None:
        self.actor_class = actor_class
        self.placement = placement
        self.size = size
        self.timeout = timeout
        self.hosts: list[Host] = []
        self.given_up = 0
        """Actors that were not placed in time, since the pool started."""
        self.lost_count = 0
        self._changed = asyncio.Condition()

    def _top_up(self) -> None:
        while len(self.hosts) < self.size:
            handle = self.actor_class.options(
                num_cpus=self.placement.num_cpus,
                resources=dict(self.placement.resources),
                max_restarts=0,
                scheduling_strategy="SPREAD",
            ).remote()
            host = Host(handle)
            host.waiter = asyncio.get_running_loop().create_task(self._wait_ready(host))
            self.hosts.append(host)

    async def _wait_ready(self, host: Host) -> None:
        import ray

        try:
            where = await asyncio.wait_for(host.handle.where.remote(), self.timeout)
        except TimeoutError:
            self.given_up += 1
            self._drop(host)
        except ray.exceptions.RayError:
            self._drop(host)
        else:
            host.ready, host.node_id = True, where["node_id"]
        async with self._changed:
            self._changed.notify_all()

    async def acquire(self) -> Host:
        """The least busy live actor; waits for one, or raises :class:`PlacementError`."""
        given_up_before = self.given_up
        async with self._changed:
            while True:
                ready = [h for h in self.hosts if h.ready]
                if ready:
                    host = min(ready, key=lambda h: h.in_flight)
                    host.in_flight += 1
                    return host
                if self.given_up > given_up_before:
                    raise PlacementError(
                        f"no live Ray node can host an episode actor asking for "
                        f"{self.placement.describe()}: none was placed within "
                        f"{self.timeout:g}s ({offered_summary()})"
                    )
                self._top_up()
                await self._changed.wait()

    def release(self, host: Host) -> None:
        host.in_flight -= 1

    async def lost(self, host: Host) -> None:
        """The actor (or its node) died: forget it; a replacement is made when needed."""
        self.lost_count += 1
        self._drop(host)
        async with self._changed:
            self._top_up()
            self._changed.notify_all()

    def _drop(self, host: Host) -> None:
        import ray

        if host in self.hosts:
            self.hosts.remove(host)
        host.ready = False
        with contextlib.suppress(Exception):
            ray.kill(host.handle, no_restart=True)

    def nodes(self) -> set[str]:
        return {h.node_id for h in self.hosts if h.node_id}

    async def close(self) -> None:
        hosts, self.hosts = self.hosts, []
        for host in hosts:
            if host.waiter is not None:
                host.waiter.cancel()
            self._drop(host)
