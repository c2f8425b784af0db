"""The episode actors of one placement: pinned per node, following the cluster, replaced when lost.

Placement. Ray's ``SPREAD`` strategy is best effort: over 8 fresh executors it put
3 zero-CPU actors on 3 nodes once, on 2 nodes five times. So the pool places each
actor itself, pinned to a node with a hard node-affinity strategy: by default as
many actors on each live node as it can host (:meth:`Placement.fits`: one per node
when nothing countable is asked; N on a node offering ``{"alfworld": N}``); with a
fixed ``size``, that many spread round-robin over the nodes that fit.

The cluster changes. Every ``refresh_every`` seconds (looked at when a group asks
for an actor) the pool lists the live nodes again: a node that joined gets its
hosts, a node that left loses them, so autoscaled nodes are used and removed ones
cost nothing.

Node loss. When one actor's call is lost, its node is *suspect* at once: no group
goes to any actor there, so a retry lands on another node, not on the next actor
of a dead machine. The pool then knocks on the node's raylet (a TCP connect with
a short timeout): no answer means the node is gone, and every host on it is
dropped at once; an answer clears it (the one actor died alone, an OOM say) and a
replacement is placed. A node whose raylet did not answer stays out until Ray
stops listing it or its raylet answers again.

Ray waits forever for an actor that no live node can host. The pool does not: an
actor that is not up within ``timeout`` seconds is given up, and a group waiting
for an actor when that happens (with no other actor up) gets a
:class:`PlacementError` naming what was asked for and what the nodes offer, which
the runner records as the group's failure. When no node fits at all, the pool
still asks Ray for unpinned actors (an autoscaler sees the demand).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.errors import AgentEnvsError

ACTOR_RUNTIME_ENV = {"env_vars": {"RAY_USE_UVLOOP": "0"}}
"""Episode actors run asyncio's own event loop: Ray gives an async actor uvloop when it
is installed (the ``gateway`` extra brings it), and the local sandbox cannot start its
workers as an unprivileged user on uvloop (it refuses, saying so), so every ReTool
episode in an actor would fail. Env vars of the actor's runtime env are merged with the
job's."""

RAYLET_PROBE_SECONDS = 1.0
"""How long a suspect node's raylet gets to accept a TCP connection."""

RECHECK_SECONDS = 10.0
"""How often a dropped node that Ray still lists is knocked on again."""


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

    def bounded(self) -> bool:
        """Whether something countable is asked (else a node's count is not a limit)."""
        return self.num_cpus > 0 or any(v > 0 for v in self.resources.values())


@dataclass(frozen=True)
class Node:
    """A live Ray node as the pool sees it."""

    node_id: str
    resources: dict[str, float]
    raylet: tuple[str, int] | None


def cluster_nodes() -> list[Node]:
    """The live nodes, from Ray's node table."""
    import ray

    nodes = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        address, port = node.get("NodeManagerAddress"), node.get("NodeManagerPort")
        raylet = (str(address), int(port)) if address and port else None
        nodes.append(Node(node["NodeID"], dict(node["Resources"]), raylet))
    return nodes


def live_nodes() -> list[dict[str, float]]:
    return [node.resources for node in cluster_nodes()]


def offered_summary() -> str:
    nodes = live_nodes()
    shown = [
        "{" + ", ".join(f"{k}={v:g}" for k, v in sorted(n.items()) if "node:" not in k) + "}"
        for n in nodes
    ]
    return f"{len(nodes)} live node(s): " + ("; ".join(shown) or "none")


def raylet_answers(raylet: tuple[str, int] | None, timeout: float = RAYLET_PROBE_SECONDS) -> bool:
    """Whether a node's raylet accepts a TCP connection (a dead machine's does not)."""
    if raylet is None:
        return False
    try:
        with socket.create_connection(raylet, timeout=timeout):
            return True
    except OSError:
        return False


def targets(placement: Placement, size: int | None, nodes: list[Node]) -> dict[str | None, int]:
    """How many actors each node should host; ``None`` keys unpinned actors (no node fits)."""
    fitting = [(node.node_id, placement.fits(node.resources)) for node in nodes]
    fitting = [(node_id, room) for node_id, room in fitting if room > 0]
    if not fitting:
        return {None: size or 1}
    if size is None:
        return dict(fitting)
    counts = {node_id: 0 for node_id, _ in fitting}
    room = dict(fitting)
    for _ in range(size):  # round-robin: the least filled node with room left
        open_nodes = [n for n in counts if counts[n] < room[n] or not placement.bounded()]
        if not open_nodes:
            break  # more asked than the nodes can host: the rest would never be placed
        counts[min(open_nodes, key=lambda n: counts[n])] += 1
    return {n: c for n, c in counts.items() if c}


@dataclass(eq=False)
class Host:
    """One actor and what the pool knows about it."""

    handle: Any
    ready: bool = False
    in_flight: int = 0
    node_id: str | None = None
    pinned: str | None = None
    """The node it was placed on by the pool (``None``: where Ray chose)."""
    waiter: asyncio.Task | None = None


class ActorPool:
    def __init__(
        self,
        actor_class: Any,
        placement: Placement,
        size: int | None,
        timeout: float,
        refresh_every: float = 2.0,
    ) -> None:
        self.actor_class = actor_class
        self.placement = placement
        self.size = size
        """A fixed number of actors, or ``None``: as many as the live nodes can host."""
        self.timeout = timeout
        self.refresh_every = refresh_every
        self.hosts: list[Host] = []
        self.given_up = 0
        """Actors that were not placed in time, since the pool started."""
        self.lost_count = 0
        self.dropped_nodes: set[str] = set()
        """Nodes whose raylet did not answer after a loss: no actor goes there."""
        self._suspect: set[str] = set()
        self._nodes: dict[str, Node] = {}
        self._knocked: dict[str, float] = {}
        self._refreshed = -float("inf")
        self._probes: set[asyncio.Task] = set()
        self._changed = asyncio.Condition()

    # ---- following the cluster -------------------------------------------------------
    def refresh(self, *, force: bool = False) -> None:
        """Match the hosts to the live nodes (at most every ``refresh_every`` s)."""
        now = time.monotonic()
        if not force and now - self._refreshed < self.refresh_every:
            return
        self._refreshed = now
        nodes = cluster_nodes()
        self._nodes = {node.node_id: node for node in nodes}
        self.dropped_nodes &= set(self._nodes)  # a node Ray no longer lists is simply gone
        for node_id in self.dropped_nodes - self._suspect:  # still listed: did it come back?
            if now - self._knocked.get(node_id, now) >= RECHECK_SECONDS:
                self._start_probe(node_id)
        usable = [n for n in nodes if n.node_id not in self.dropped_nodes | self._suspect]
        wanted = targets(self.placement, self.size, usable)
        have: dict[str | None, list[Host]] = {}
        for host in self.hosts:
            have.setdefault(host.pinned, []).append(host)
        for node_id, hosts in have.items():  # shrink: nodes gone, or fewer wanted
            if node_id in self._suspect:
                continue  # its probe decides
            extra = len(hosts) - wanted.get(node_id, 0)
            for host in sorted(hosts, key=lambda h: h.in_flight)[: max(extra, 0)]:
                # A busy host is dropped only when its node is gone (its group is lost
                # anyway); an unpinned one (``None``) runs somewhere live: let it finish.
                if host.in_flight == 0 or (node_id is not None and node_id not in self._nodes):
                    self._drop(host)
        for node_id, count in wanted.items():  # grow
            for _ in range(count - len(have.get(node_id, []))):
                self._place(node_id)

    def _place(self, node_id: str | None) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        strategy: Any = "DEFAULT"
        if node_id is not None:
            strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
        handle = self.actor_class.options(
            num_cpus=self.placement.num_cpus,
            resources=dict(self.placement.resources),
            max_restarts=0,
            scheduling_strategy=strategy,
            runtime_env=ACTOR_RUNTIME_ENV,
        ).remote()
        host = Host(handle, pinned=node_id, node_id=node_id)
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

    # ---- groups ----------------------------------------------------------------------
    async def acquire(self) -> Host:
        """The least busy live actor off suspect nodes; waits for one, or raises
        :class:`PlacementError`."""
        given_up_before = self.given_up
        async with self._changed:
            while True:
                self.refresh()
                ready = [h for h in self.hosts if h.ready and h.node_id not in self._suspect]
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
                with contextlib.suppress(TimeoutError):  # look at the cluster again then
                    await asyncio.wait_for(self._changed.wait(), self.refresh_every)

    def release(self, host: Host) -> None:
        host.in_flight -= 1

    async def lost(self, host: Host) -> None:
        """The actor (or its node) died: forget it, and find out whether its node did."""
        self.lost_count += 1
        self._drop(host)
        if host.node_id is not None and host.node_id not in self.dropped_nodes:
            self._start_probe(host.node_id)
        async with self._changed:
            self._changed.notify_all()

    def _start_probe(self, node_id: str) -> None:
        """Mark the node suspect (synchronously: a retry right after goes elsewhere)
        and knock on its raylet in a thread."""
        if node_id in self._suspect:
            return
        self._suspect.add(node_id)
        self._knocked[node_id] = time.monotonic()
        probe = asyncio.get_running_loop().create_task(self._probe(node_id))
        self._probes.add(probe)
        probe.add_done_callback(self._probes.discard)

    async def _probe(self, node_id: str) -> None:
        node = self._nodes.get(node_id)
        alive = await asyncio.to_thread(raylet_answers, node.raylet if node else None)
        self._suspect.discard(node_id)
        if alive:
            self.dropped_nodes.discard(node_id)  # one actor died alone, or the node is back
        else:
            self.dropped_nodes.add(node_id)
            for other in [h for h in self.hosts if node_id in (h.node_id, h.pinned)]:
                self._drop(other)
        async with self._changed:
            self.refresh(force=True)
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
        for probe in list(self._probes):
            probe.cancel()
        hosts, self.hosts = self.hosts, []
        for host in hosts:
            if host.waiter is not None:
                host.waiter.cancel()
            self._drop(host)
