"""Starting an env server: check what to host, refuse an open port without a token,
mount OpenEnv's wire beside ours when asked, and run uvicorn."""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.serving.app import ServedEnvs, create_app
from agentenvs.envs.serving.sessions import SessionLimits


class ServeError(AgentEnvsError, ValueError):
    """A server that must not start as asked (the message says why and what to do)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_exposure(host: str, token: str | None) -> None:
    """A server bound beyond loopback hosts code anyone reaching it can drive: it needs
    a bearer token."""
    if not is_loopback(host) and not token:
        raise ServeError(
            f"--host {host} is reachable beyond this machine: give --token (or "
            "$AGENTENVS_ENV_SERVER_TOKEN) so clients must present it"
        )


def check_env_names(names: Sequence[str]) -> list[str]:
    from agentenvs.envs.registry import config_class

    if not names:
        raise ServeError("name at least one environment to serve (see `agentenvs list`)")
    for name in names:
        config_class(name)  # UnknownEnvError names the registered ones
    return list(dict.fromkeys(names))


def event_loop_for(names: Sequence[str]) -> str:
    """uvicorn's ``loop`` for a server hosting ``names``: ``uvloop`` (installed with the
    gateway extra; a frame costs less than half the CPU) when every one declares that its
    episodes run on any loop (``EnvConfig.any_event_loop``), else asyncio's own, which
    the local sandbox needs to start its workers as another user."""
    import importlib.util

    from agentenvs.envs.registry import config_class

    if importlib.util.find_spec("uvloop") is None:
        return "asyncio"
    if all(config_class(name).any_event_loop for name in names):
        return "uvloop"
    return "asyncio"


def build_app(
    names: Sequence[str],
    tokenizer: Any,
    *,
    tokenizer_spec: str = "builtin",
    limits: SessionLimits | None = None,
    token: str | None = None,
    openenv: bool = False,
    openenv_configs: Mapping[str, Mapping[str, Any]] | None = None,
    ors: bool = False,
) -> FastAPI:
    """The app ``agentenvs serve`` runs: our endpoints, plus, with ``openenv``, OpenEnv's
    app of each env at ``/openenv/<env>``, and with ``ors``, the ORS routes of every env
    at the root (the SDK's clients address the server's root, not a prefix)."""
    names = check_env_names(names)
    app = create_app(ServedEnvs(names, tokenizer, tokenizer_spec), limits, token=token)
    if openenv:
        mount_openenv(app, names, openenv_configs or {})
    if ors:
        mount_ors(app, names)
    return app


def mount_ors(app: FastAPI, names: Sequence[str]) -> None:
    """The ORS app of ``names`` behind our routes: a path none of ours takes (``/create``,
    ``/<env>/call``, ...) goes to it. Its lifespan (the SDK's idle-session reaper) runs
    inside ours."""
    try:
        from agentenvs.envs.ors.server import ors_app, release_app
    except ImportError as err:
        raise ServeError(f"--ors: the openreward SDK is not available ({err})") from None
    mounted = ors_app(names)
    app.mount("/", mounted)
    app.state.sub_apps.append(mounted)
    app.state.shutdown_hooks.append(functools.partial(release_app, mounted))


def mount_openenv(
    app: FastAPI, names: Sequence[str], configs: Mapping[str, Mapping[str, Any]]
) -> None:
    try:
        from agentenvs.envs.openenv.server import openenv_app, release_app
    except ModuleNotFoundError as err:
        raise ServeError(f"--openenv: OpenEnv is not available ({err})") from None
    for name in names:
        mounted = openenv_app(name, configs.get(name))
        app.mount(f"/openenv/{name}", mounted)
        app.state.shutdown_hooks.append(functools.partial(release_app, mounted))


def bind_socket(host: str, port: int) -> socket.socket:
    """The listening address, bound before the server starts, so a port in use (or a
    host that does not resolve) is one clear error rather than uvicorn's log line."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as err:
        raise ServeError(f"--host {host}: cannot resolve it ({err.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as err:
        sock.close()
        raise ServeError(f"--port {port}: cannot listen on {host}:{port} ({err.strerror}); "
                         "is another server there? pick another --port") from None  # fmt: skip
    return sock


def serve(
    app: FastAPI, sock: socket.socket, *, log_level: str = "warning", loop: str = "asyncio"
) -> None:
    """Serve on the bound ``sock`` until interrupted (blocking), on the event ``loop``
    uvicorn names (asyncio's own unless :func:`event_loop_for` says the envs allow uvloop;
    uvicorn's ``auto`` would take uvloop whenever installed, which the sandbox refuses)."""
    import uvicorn

    config = uvicorn.Config(app, log_level=log_level, access_log=False, loop=loop)
    uvicorn.Server(config).run(sockets=[sock])
