"""``agentenvs check`` (is a run's data fit to train on?) and ``agentenvs check-template``
(does a chat template extend each turn?)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from agentenvs.rollout.cli.common import (
    EXIT_FAILED_GROUPS,
    CLIError,
    friendly_errors,
    load_tokenizer_or_fail,
    load_view_tokenizer,
    one_line,
    out,
)

_STATUS_STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}


def check_command(
    file: Annotated[Path, typer.Argument(help="A trajectory store or a JSONL samples hand-off.")],
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="Tokenizer for the decode and re-rendering checks (default: the file's)."
        ),
    ] = None,
    current_version: Annotated[
        int | None, typer.Option(help="The policy's current weights version, to judge staleness.")
    ] = None,
    max_staleness: Annotated[
        int | None, typer.Option(help="Fail when a group is more versions behind than this.")
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="One JSON object instead of a table.")
    ] = False,
) -> None:
    """Check that a run's data lines up before training on it; exit 1 on any failure."""
    from agentenvs.rollout.inspect.check import check_file, file_kind

    with friendly_errors():
        if not file.is_file():
            raise CLIError(f"cannot read {file}: no such file")
        tok = None
        try:
            kind = file_kind(file)
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise CLIError(one_line(str(error))) from None
        if kind == "trajectories":
            from agentenvs.rollout.inspect.viewer import load_records

            tok, _ = load_view_tokenizer(load_records(file), tokenizer)
        try:
            report = check_file(
                file, tokenizer=tok, current_version=current_version, max_staleness=max_staleness
            )
        except (ValueError, KeyError) as error:
            raise CLIError(f"{file}: {one_line(str(error))}") from None
    if json_output:
        payload = {
            "source": report.source,
            "kind": report.kind,
            "ok": report.ok,
            "stats": report.stats,
            "findings": [vars(f) for f in report.findings],
        }
        sys.stdout.write(json.dumps(payload, sort_keys=True) + "\n")
    else:
        table = Table(title=f"agentenvs check: {file} ({report.kind})")
        for column in ("check", "status", "detail", "first offender"):
            table.add_column(column, overflow="fold")
        for finding in report.findings:
            style = _STATUS_STYLE[finding.status]
            table.add_row(
                finding.check, f"[{style}]{finding.status}[/]", finding.detail, finding.where
            )
        out.print(table)
        out.print(
            ("[green]all checks passed[/]" if report.ok else "[bold red]checks failed[/]")
            + f"  {report.stats}"
        )
    if not report.ok:
        raise typer.Exit(EXIT_FAILED_GROUPS)


def check_template_command(
    tokenizer: Annotated[
        str, typer.Argument(help="A local Hugging Face tokenizer directory, or 'builtin'.")
    ],
    strict: Annotated[
        bool, typer.Option(help="Exit 1 when the template does not extend every turn.")
    ] = False,
) -> None:
    """Does the chat template extend each turn? Where not, the collector splits samples."""
    from agentenvs.rollout.inspect.template_check import check_template

    with friendly_errors():
        tok = load_tokenizer_or_fail(tokenizer)
        try:
            report = check_template(tok, tokenizer)
        except Exception as error:  # a template that cannot render these conversations
            raise CLIError(
                f"template of {tokenizer!r} failed to render: {one_line(str(error))}"
            ) from None
    table = Table(title=f"chat template of {report.tokenizer}")
    for column in ("conversation", "turn", "extends", "collector does", "detail"):
        table.add_column(column, overflow="fold")
    for conv in report.conversations:
        for turn in conv.turns:
            mark = "[green]yes[/]" if turn.extends else "[bold red]no[/]"
            table.add_row(conv.name, str(turn.turn), mark, turn.collector_action, turn.detail)
    out.print(table)
    verdict = (
        "extends every turn: one training sample per trajectory"
        if report.extends
        else "rewrites history: the collector starts a new sample at each break (counted in "
        "metric renderer/prefix_breaks)"
    )
    out.print(verdict)
    if strict and not report.extends:
        raise typer.Exit(EXIT_FAILED_GROUPS)
