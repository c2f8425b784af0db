"""``agentenvs sandbox ...``: inspect (and, with ``serve``, expose) the sandbox.

Mounted by the main ``agentenvs`` command when this module imports. ``capabilities``
measures which isolation layers the chosen backend has on this machine; with
``--require`` it exits 1 when a required layer is missing, so CI can gate on it.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    name="sandbox",
    help="Isolated execution of untrusted code: capability report (and server).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_MISSING = 1
EXIT_UNAVAILABLE = 2


@app.callback()
def sandbox_group() -> None:
    """Isolated execution of untrusted code."""


@app.command("capabilities")
def capabilities_command(
    backend: Annotated[str, typer.Option(help="local, docker or sandboxfusion.")] = "local",
    require: Annotated[
        list[str] | None,
        typer.Option("--require", help="A layer that must be active (repeatable); exit 1 if not."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Measure which isolation layers are active on this machine, and why others are not."""
    from agentenvs.sandbox.base import SandboxUnavailable
    from agentenvs.sandbox.capabilities import capability_report

    try:
        report = capability_report(backend=backend, min_isolation=list(require or []))
    except (SandboxUnavailable, ValueError, ImportError) as exc:
        err.print(f"error: the {backend} sandbox is unavailable: {exc}")
        raise typer.Exit(EXIT_UNAVAILABLE) from None
    if as_json:
        out.print(json.dumps(report, indent=2), markup=False)
    else:
        table = Table(title=f"{report['backend']} sandbox: isolation layers")
        table.add_column("layer")
        table.add_column("active")
        table.add_column("details")
        for name, active in report["active"].items():
            table.add_row(name, "yes" if active else "NO", report["notes"].get(name, ""))
        out.print(table)
    if report["missing"]:
        err.print(f"missing required layer(s): {', '.join(report['missing'])}")
        raise typer.Exit(EXIT_MISSING)


@app.command("serve")
def serve_command(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    backend: Annotated[
        str, typer.Option(help="Backend that runs the code: local or docker.")
    ] = "local",
    pool_size: Annotated[int, typer.Option(help="Warm workers (executions at once).")] = 2,
    spare_workers: Annotated[
        int,
        typer.Option(
            help="Warm workers kept aside: one replaces a recycled worker at once, or serves "
            "while every pool worker is held by a long (e.g. hostile) run."
        ),
    ] = 1,
    timeout: Annotated[
        float,
        typer.Option(help="Wall seconds per execution: the default and the most a request gets."),
    ] = 10.0,
    memory_mb: Annotated[
        int,
        typer.Option(help="Memory per execution (MB): the default and the most a request gets."),
    ] = 1024,
    max_output_kb: Annotated[
        int,
        typer.Option(
            help="Output cap per stream (KiB); a program passing it is stopped (status Failed)."
        ),
    ] = 1024,
    require: Annotated[
        list[str] | None,
        typer.Option(
            "--require", help="A layer that must be active (repeatable), else refuse to start."
        ),
    ] = None,
    client_timeout: Annotated[
        float,
        typer.Option(
            min=0.1,
            help="Seconds a client has to send a request's head (3x that for its body); "
            "a connection that does not is closed.",
        ),
    ] = 10.0,
) -> None:
    """Serve SandboxFusion's POST /run_code (and /v1/ping) over this machine's sandbox.

    Existing SandboxFusion clients (verl, the sandbox-fusion package) work unchanged:
    point them at http://HOST:PORT. A request may lower the limits above, never raise
    them (docs/sandbox_server.md).
    """
    from agentenvs.sandbox.base import SandboxConfig
    from agentenvs.sandbox.server.app import serve
    from agentenvs.sandbox.server.connections import ClientLimits

    if backend not in ("local", "docker"):
        err.print(f"error: --backend must be local or docker, not {backend!r}")
        raise typer.Exit(EXIT_UNAVAILABLE)
    config = SandboxConfig(
        backend=backend,  # type: ignore[arg-type]
        pool_size=pool_size,
        spare_workers=spare_workers,
        timeout=timeout,
        memory_limit_mb=memory_mb,
        max_output_bytes=max_output_kb * 1024,
        min_isolation=list(require or []),
        show_last_expression=False,
    )
    err.print(f"serving the {backend} sandbox on http://{host}:{port}/run_code")
    clients = ClientLimits.from_timeout(client_timeout)
    serve(host=host, port=port, config=config, log_level="warning", clients=clients)
