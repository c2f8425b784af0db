"""The ``agentenvs`` command: list environments, collect rollouts, view and check them, demo.

Bad input (an unknown environment, a config key it does not accept, a file that is
not a trajectory store, a policy server that does not answer) ends with one line
on stderr and a non-zero exit, never a traceback: the person typing the command
made a mistake or hit an outage, and the message should say which.

Exit codes: 0 success, 1 the run happened but groups failed, 2 bad input.
Heavy imports happen inside the commands so ``agentenvs --help`` stays instant.

One module per command group (``listing``, ``rollout``, ``view``, ``check``, ``demo``,
``preset``); this
module makes the app and registers their commands in the order ``--help`` shows them.
Shared parsing and error handling live in ``common``.
The sandbox and retriever command groups live with their packages and are mounted here.
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from agentenvs.envs.cli_logging import quiet_logging
from agentenvs.envs.references import Registry, load_ref
from agentenvs.rollout.cli import check, compare, demo, listing, preset, rollout, serve, view
from agentenvs.rollout.cli import eval as eval_cli
from agentenvs.rollout.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED_GROUPS,
    CLIError,
    friendly_errors,
    load_tokenizer_or_fail,
    parse_assignments,
    parse_value,
)
from agentenvs.rollout.cli.listing import EnvRow, registered_envs
from agentenvs.rollout.cli.rollout_run import RolloutRun, run_rollout

app = typer.Typer(
    name="agentenvs",
    help="Multi-turn agent environments for LLM RL: list, roll out, view, check, demo.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("agentenvs")
        except PackageNotFoundError:  # running from a source tree that is not installed
            number = "unknown"
        typer.echo(f"agentenvs {number}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Multi-turn agent environments for LLM RL: list, roll out, view, check, demo."""


app.command("list")(listing.list_command)
app.command("rollout", epilog=preset.presets_epilog())(rollout.rollout_command)
app.command("eval", epilog=preset.presets_epilog())(eval_cli.eval_command)
app.command("view")(view.view_command)
app.command("check")(check.check_command)
app.command("check-template")(check.check_template_command)
app.command("compare")(compare.compare_command)
app.command("demo")(demo.demo_command)
app.command("serve")(serve.serve_command)
app.command("gateway")(load_ref("agentenvs.rollout.cli.gateway:gateway_command"))
app.add_typer(preset.app, name="preset")

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED_GROUPS",
    "SUBAPPS",
    "CLIError",
    "EnvRow",
    "RolloutRun",
    "app",
    "friendly_errors",
    "load_tokenizer_or_fail",
    "main",
    "mount_subapps",
    "parse_assignments",
    "parse_value",
    "registered_envs",
    "run_rollout",
]

# ---- optional sub-apps ---------------------------------------------------------------------------

SUBAPPS = Registry(
    "command group",
    {
        "sandbox": "agentenvs.sandbox.cli:app",
        "retriever": "agentenvs.envs.search_r1.cli:app",
        "mcp": "agentenvs.envs.mcp.cli:app",
    },
)
"""Command groups that live with their packages, mounted when their modules import."""


def mount_subapps(main_app: typer.Typer) -> list[str]:
    """Mount other parts' command groups when their modules import.

    A group whose optional dependencies are not installed (a ``ModuleNotFoundError``
    for a module outside agentenvs) is left out quietly; any other failure to import
    it is a bug, and is said on stderr rather than hidden, while the other commands
    keep working."""
    mounted = []
    for name, reference in SUBAPPS.references().items():
        try:
            sub = load_ref(reference)
        except Exception as err:
            missing = err.name if isinstance(err, ModuleNotFoundError) else None
            if not (missing and not missing.startswith("agentenvs")):  # not an optional extra
                logging.getLogger(__name__).warning(
                    "`agentenvs %s` is unavailable: importing %s failed: %r", name, reference, err
                )
            continue
        if isinstance(sub, typer.Typer):
            main_app.add_typer(sub, name=name)
            mounted.append(name)
    return mounted


mount_subapps(app)


def main() -> None:
    """The ``agentenvs`` console script."""
    quiet_logging()
    app()
