"""``agentenvs serve ENV [ENV ...]``: host registered environments as an HTTP service.

The token-level wire (docs/env-servers.md) is what ``agentenvs rollout ENV --env-server
URL`` and :class:`agentenvs.envs.remote.RemoteDataset` drive; ``--openenv`` also mounts
OpenEnv's HTTP/WebSocket app of each env at ``/openenv/<env>``; ``--ors`` serves each env as
an ORS environment (the ``openreward`` SDK's routes, at the root). Bound beyond loopback,
the server needs a bearer token (``--token`` or ``$AGENTENVS_ENV_SERVER_TOKEN``; ORS clients
send it as ``X-API-Key``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Annotated

import typer

from agentenvs.rollout.cli.common import CLIError, err, friendly_errors, load_tokenizer_or_fail
from agentenvs.rollout.cli.flag_groups import with_flag_groups
from agentenvs.rollout.cli.options import RenderTokenizer

TOKEN_VAR = "AGENTENVS_ENV_SERVER_TOKEN"


@dataclass(frozen=True)
class SessionFlags:
    """How much one server holds at once."""

    max_groups: Annotated[
        int, typer.Option(metavar="N", help="Group sessions held at once (more get 429).")
    ] = 1024
    max_envs_per_group: Annotated[
        int, typer.Option(metavar="N", help="Envs (roots and forks) one group may hold.")
    ] = 256
    max_steps: Annotated[int, typer.Option(metavar="N", help="Steps one episode may take.")] = (
        10_000
    )
    idle_timeout: Annotated[
        float, typer.Option(metavar="SECONDS", help="Close a group after this long unused.")
    ] = 300.0


@with_flag_groups
def serve_command(
    envs: Annotated[
        list[str],
        typer.Argument(metavar="ENV...", help="Registered environments to host (agentenvs list)."),
    ],
    host: Annotated[str, typer.Option(metavar="HOST", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="PORT", help="Port to listen on.")] = 8100,
    tokenizer: RenderTokenizer = "builtin",
    token: Annotated[
        str | None,
        typer.Option(metavar="TOKEN", help=f"Bearer token clients must send (or ${TOKEN_VAR})."),
    ] = None,
    *,
    sessions: SessionFlags,
    openenv: Annotated[
        bool, typer.Option("--openenv", help="Also serve OpenEnv's wire at /openenv/<env>.")
    ] = False,
    ors: Annotated[
        bool, typer.Option("--ors", help="Also serve the OpenReward Standard's routes (ORS).")
    ] = False,
    log_level: Annotated[
        str, typer.Option(metavar="LEVEL", help="uvicorn's log level.")
    ] = "warning",
) -> None:
    """Serve ENV... over HTTP: sessions of groups, token-level steps, health and metrics."""
    from agentenvs.envs.serving.run import (
        ServeError,
        bind_socket,
        build_app,
        check_exposure,
        event_loop_for,
        serve,
    )
    from agentenvs.envs.serving.sessions import SessionLimits

    with friendly_errors(debug=False):
        secret = token or os.environ.get(TOKEN_VAR) or None
        try:
            check_exposure(host, secret)
            limits = SessionLimits(
                sessions.max_groups,
                sessions.max_envs_per_group,
                sessions.max_steps,
                sessions.idle_timeout,
            )
        except (ServeError, ValueError) as error:
            raise CLIError(str(error)) from None
        tokenizer = tokenizer or "builtin"
        loaded = load_tokenizer_or_fail(tokenizer)
        try:
            app = build_app(
                envs, loaded, tokenizer_spec=tokenizer, limits=limits, token=secret,
                openenv=openenv, ors=ors,
            )  # fmt: skip
            sock = bind_socket(host, port)
        except ServeError as error:
            raise CLIError(str(error)) from None
        bound = sock.getsockname()[1]  # --port 0 takes a free one: say which
        err.print(f"serving {', '.join(envs)} on http://{host}:{bound}", markup=False)
    serve(app, sock, log_level=log_level, loop=event_loop_for(envs))
