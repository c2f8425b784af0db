"""Which Ray a run uses, checked before Ray is asked: fail fast, join loopback, say where.

Three things Ray does on its own that a run must not:

* an address nothing answers on makes ``ray.init`` retry its GCS connection for
  about 13 minutes (20 tries of 40 s), deaf to Ctrl-C, and a malformed one raises
  a long traceback. :func:`resolve` checks the form and knocks on the address (a
  TCP connect, then an HTTP/2 handshake as gRPC does, a few seconds) first, so a bad address
  is one :class:`RayAddressError` line;
* on Linux, Ray swaps ``127.0.0.1`` in an address for the machine's outward
  address, unless a switch read when ``ray`` is first imported
  (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``) says otherwise, so a driver joining a
  loopback cluster waits on an address nothing listens on.
  :func:`keep_loopback` sets that switch, in the environment and in Ray's already
  imported constant, when (and only when) the address is a loopback one;
* with no address, ``ray.init()`` joins ``RAY_ADDRESS`` or the cluster of the last
  ``ray start`` on the machine. A run without ``--ray-address`` starts its own Ray
  (``address="local"``); joining one is what ``--ray-address auto`` asks for.

:func:`describe_connection` is the one line a run prints to say which Ray it uses.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass

from agentenvs.envs.errors import AgentEnvsError

PROBE_SECONDS = 3.0
"""How long the address gets to accept a TCP connection, and then a gRPC handshake."""

LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


class RayAddressError(AgentEnvsError, ValueError):
    """The Ray address is malformed, or nothing that speaks Ray answers there."""


@dataclass(frozen=True)
class RayTarget:
    """An address to join, as given and as resolved (``auto``: the cluster found)."""

    given: str
    host: str
    port: int
    client: bool = False
    """A Ray Client address (``ray://HOST:PORT``)."""

    @property
    def address(self) -> str:
        """What ``ray.init`` is given."""
        hostport = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        return f"ray://{hostport}" if self.client else hostport

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse(address: str) -> RayTarget:
    """``HOST:PORT`` or ``ray://HOST:PORT``; a :class:`RayAddressError` for anything else."""
    text = address.strip()
    client = text.startswith("ray://")
    rest = text.removeprefix("ray://")
    host, sep, port_text = rest.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    usage = "expected auto or HOST:PORT (the head's GCS port, e.g. 10.0.0.5:6379)"
    if not sep or not host or "/" in rest or " " in rest:
        raise RayAddressError(f"--ray-address {address!r} is not a Ray address: {usage}")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise RayAddressError(
            f"--ray-address {address!r}: the port must be a number from 1 to 65535; {usage}"
        )
    return RayTarget(address, host, int(port_text), client)


def resolve(address: str, timeout: float = PROBE_SECONDS) -> RayTarget:
    """The target for ``address`` (``auto``: ``RAY_ADDRESS`` or the last ``ray start``),
    checked to answer; raises :class:`RayAddressError` naming what is wrong."""
    if address.strip() == "auto":
        from ray._private import services

        try:
            found = services.get_ray_address_from_environment("auto", None)
        except ConnectionError:
            found = None
        if not found or found == "auto":
            raise RayAddressError(
                "--ray-address auto found no running Ray cluster on this machine (no "
                "RAY_ADDRESS, no `ray start`); pass the head's HOST:PORT"
            )
        target = parse(found)
        target = RayTarget("auto", target.host, target.port, target.client)
    else:
        target = parse(address)
    knock(target, timeout)
    return target


def knock(target: RayTarget, timeout: float = PROBE_SECONDS) -> None:
    """A TCP connect, then (for a GCS address) a gRPC handshake, each within ``timeout``."""
    shown = target.address if target.given == "auto" else target.given
    try:
        with socket.create_connection((target.host, target.port), timeout=timeout) as conn:
            speaks = target.client or _answers_http2(conn, timeout)
    except OSError as err:
        reason = "timed out" if isinstance(err, TimeoutError) else (err.strerror or str(err))
        raise RayAddressError(
            f"cannot reach a Ray cluster at {shown}: {reason} (after {timeout:g}s at most); "
            "is the head running (`ray start --head`) and is its port open from here?"
        ) from None
    if not speaks:
        raise RayAddressError(
            f"{shown} accepts connections but does not answer as a Ray GCS (no gRPC "
            f"handshake within {timeout:g}s); pass the head's GCS port (6379 by default)"
        )


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
"""An HTTP/2 frame header: length 0, type 4 (SETTINGS), no flags, stream 0."""


def _answers_http2(conn: socket.socket, timeout: float) -> bool:
    """Whether the server answers an HTTP/2 preface with a SETTINGS frame, as every
    gRPC server (the GCS) does first; a web server or a closed port does not."""
    conn.settimeout(timeout)
    try:
        conn.sendall(_HTTP2_PREFACE + _EMPTY_SETTINGS)
        header = b""
        while len(header) < 9:
            chunk = conn.recv(9 - len(header))
            if not chunk:
                return False
            header += chunk
    except OSError:
        return False
    return header[3] == 0x04


def keep_loopback(target: RayTarget) -> None:
    """Stop Ray from swapping a loopback address for the machine's outward one.

    Ray reads the switch into a module constant when first imported, so the
    environment alone is too late once anything imported ``ray``; both are set
    (the environment for processes this one starts)."""
    if not target.loopback:
        return
    os.environ[LOOPBACK_SWITCH] = "0"
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def describe_connection(how: str) -> str:
    """One line: which Ray this run uses (``how``: started, joined or reused)."""
    import ray

    context = ray.get_runtime_context()
    gcs = getattr(context, "gcs_address", None) or "?"
    alive = [n for n in ray.nodes() if n.get("Alive")]
    cpus = sum(n.get("Resources", {}).get("CPU", 0.0) for n in alive)
    where = {
        "started": "started a local Ray for this run",
        "joined": "joined the Ray cluster",
        "reused": "using the Ray this process had already joined",
    }[how]
    return f"ray: {where} at {gcs} ({len(alive)} node(s), {cpus:g} CPUs)"
