"""``agentenvs check`` (is a run's data fit to train on?) and ``agentenvs check-template``
(does a chat template extend each turn?)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from agentenvs.rollout.cli.common import (
    EXIT_FAILED_GROUPS,
    CLIError,
    friendly_errors,
    load_tokenizer_or_fail,
    load_view_tokenizer,
    one_line,
    out,
    read_store_warning,
)

_STATUS_STYLE = {
    "pass": "green",
    "fail": "bold red",
    "warn": "yellow",
    "info": "cyan",
    "skip": "dim",
}


def check_command(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="A trajectory store or a JSONL samples hand-off.")
    ],
    tokenizer: Annotated[
        str | None,
        typer.Option(
            metavar="builtin|DIR",
            help="Tokenizer for the decode and re-rendering checks (default: the file's).",
        ),
    ] = None,
    current_version: Annotated[
        int | None,
        typer.Option(metavar="V", help="The policy's current weights version, to judge staleness."),
    ] = None,
    max_staleness: Annotated[
        int | None,
        typer.Option(metavar="K", help="Fail when a group is more versions behind than this."),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="One JSON object instead of a table.")
    ] = False,
    text_trainer: Annotated[
        bool,
        typer.Option(
            "--text-trainer",
            help="Fail when a sample's decoded text re-tokenizes to other ids (for trainers "
            "that re-tokenize text).",
        ),
    ] = False,
    store: Annotated[
        Path | None,
        typer.Option(
            metavar="STORE", help="For a samples file: the trajectory store it was made from."
        ),
    ] = None,
    rescore: Annotated[
        str | None,
        typer.Option(
            metavar="MODEL",
            help="A local Hugging Face model directory: recompute every sampled token's "
            "logprob and fail where the recorded one is outside the sampler dtype's noise.",
        ),
    ] = None,
    rescore_dtype: Annotated[
        str,
        typer.Option(metavar="DTYPE", help="The sampler's dtype, which sets the tolerance."),
    ] = "float32",
    drift: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="The trainer's drift log (JSONL): fail groups of a batch whose tokens "
            "disagreed with the trainer's weights of the version they claim.",
        ),
    ] = None,
    against: Annotated[
        Path | None,
        typer.Option(
            metavar="STORE",
            help="Another trajectory store: fail where its reward code (function, version, "
            "code hash, judge settings) differs from this one's.",
        ),
    ] = None,
    max_tool_parse_failures: Annotated[
        float,
        typer.Option(
            metavar="SHARE",
            help="Fail a tool environment whose share of tool-call attempts that failed to "
            "parse is above this (0.05 is 5%).",
            min=0.0,
            max=1.0,
        ),
    ] = 0.02,
    card: Annotated[
        str | None,
        typer.Option(
            metavar="PRESET",
            help="Fail a store that drifted from the preset's reproduction card (config, "
            "task panel and order, first prompts, chat template, oracle reward band).",
        ),
    ] = None,
) -> None:
    """Check that a run's data lines up before training on it; exit 1 on any failure."""
    from agentenvs.rollout.inspect.check import check_file, check_records, file_kind
    from agentenvs.rollout.inspect.rescore import load_rescorer
    from agentenvs.rollout.weights.drift import read_drift

    with friendly_errors():
        if file.is_dir():
            raise CLIError(f"{file}: is a directory; pass a trajectory store or a samples file")
        if not file.is_file():
            raise CLIError(f"cannot read {file}: no such file")
        try:
            kind = file_kind(file)
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise CLIError(one_line(str(error))) from None
        try:
            rescorer = load_rescorer(rescore, rescore_dtype) if rescore else None
        except (OSError, ValueError) as error:
            raise CLIError(f"cannot rescore with {rescore!r}: {one_line(str(error))}") from None
        try:
            if kind == "trajectories":
                contents = read_store_warning(file)  # torn lines: one warning each
                tok, _ = load_view_tokenizer(contents.records, tokenizer)
                report = check_records(
                    contents.latest(),  # a failure a rerun fixed is not a failure
                    source=str(file),
                    tokenizer=tok,
                    current_version=current_version,
                    max_staleness=max_staleness,
                    text_trainer=text_trainer,
                    drift=read_drift(drift) if drift is not None else None,
                    every_line=contents.records,  # a group stored twice is caught
                    rescorer=rescorer,
                    max_tool_parse_failures=max_tool_parse_failures,
                )
                if contents.problems:
                    report.stats["skipped_lines"] = len(contents.problems)
                if against is not None:
                    report.findings += _against(contents.latest(), against)
                if card is not None:
                    from agentenvs.rollout.presets.card import card_findings

                    report.findings += card_findings(contents.latest(), card, tok)
            else:
                if card is not None:
                    raise CLIError("--card compares a trajectory store, not a samples file")
                if against is not None:
                    raise CLIError("--against compares trajectory stores, not a samples file")
                report = check_file(
                    file,
                    tokenizer=load_tokenizer_or_fail(tokenizer) if tokenizer else None,
                    current_version=current_version,
                    max_staleness=max_staleness,
                    text_trainer=text_trainer,
                    reference=store,
                    rescorer=rescorer,
                )
        except (ValueError, KeyError) as error:
            text = one_line(str(error))
            raise CLIError(text if text.startswith(str(file)) else f"{file}: {text}") from None
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
        out.print(findings_table(report, f"agentenvs check: {file} ({report.kind})"))
        out.print(verdict_table(report))
    if not report.ok:
        raise typer.Exit(EXIT_FAILED_GROUPS)


def _against(records: Any, other: Path) -> list[Any]:
    """The reward-identity comparison with another store (``--against``)."""
    from agentenvs.rollout.inspect.reward_checks import compare_reward_identities

    if not other.is_file():
        raise CLIError(f"cannot read {other}: no such file")
    return compare_reward_identities(records, read_store_warning(other).latest(), str(other))


def findings_table(report: Any, title: str) -> Table:
    table = Table(title=title)
    for column in ("check", "status", "detail", "first offender"):
        table.add_column(column, overflow="fold")
    for finding in report.findings:
        style = _STATUS_STYLE[finding.status]
        table.add_row(
            finding.check, f"[{style}]{finding.status}[/]", escape(finding.detail), finding.where
        )
    return table


def verdict_table(report: Any) -> Table:
    """The verdict and the counts behind it, as a table (not a Python dict)."""
    verdict = "[green]all checks passed[/]" if report.ok else "[bold red]checks failed[/]"
    table = Table(show_header=False, title=verdict)
    table.add_column("", style="bold")
    table.add_column("", justify="right")
    statuses = Counter(f.status for f in report.findings)
    for status in ("fail", "warn", "pass", "info", "skip"):
        if statuses[status]:
            table.add_row(f"checks {status}", str(statuses[status]))
    for key, value in report.stats.items():
        table.add_row(str(key).replace("_", " "), str(value))
    return table


def check_template_command(
    tokenizer: Annotated[
        str,
        typer.Argument(
            metavar="TOKENIZER", help="A local Hugging Face tokenizer directory, or 'builtin'."
        ),
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
