"""``agentenvs check`` (is a run's data fit to train on?) and ``agentenvs check-template``
(does a chat template extend each turn?)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.table import Table

from agentenvs.rollout.cli.common import (
    EXIT_FAILED_GROUPS,
    CLIError,
    friendly_errors,
    load_tokenizer_or_fail,
    one_line,
    out,
)


def check_command(
    file: Annotated[
        Path,
        typer.Argument(
            metavar="FILE",
            help="A trajectory store, or a hand-off: JSONL samples, a verl batch file, a "
            "Tinker/PyTRIO datum file.",
        ),
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
        typer.Option(metavar="K", help="Fail a trajectory sampled more versions behind than this."),
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
            metavar="STORE",
            help="For a hand-off: the trajectory store it was made from (checked too).",
        ),
    ] = None,
    replay: Annotated[
        bool,
        typer.Option(
            "--replay",
            help="Re-run every episode of a deterministic environment from its record and "
            "fail where the env gives other observations, rewards, ends or tool outcomes.",
        ),
    ] = False,
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
    require_verified: Annotated[
        bool | None,
        typer.Option(
            "--require-verified/--no-require-verified",
            help="Fail trained turns whose weights proof is lost, failed or missing (default: "
            "on when the store carries proofs).",
            show_default=False,
        ),
    ] = None,
    against: Annotated[
        str | None,
        typer.Option(
            metavar="STORE|VERSION",
            help="Another trajectory store: fail where its reward code differs from this "
            "one's. Or a reward version (2, or NAME@2): regrade under the installed code of "
            "that version where it differs from the recorded code (with --replay).",
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
    health: Annotated[
        str,
        typer.Option(
            metavar="fail|warn",
            help="What a run-health failure (no tool call, many parse failures, groups "
            "without a learning signal, judges without a verdict) does: fail, or warn.",
        ),
    ] = "fail",
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
    from agentenvs.rollout.cli.check_output import print_report
    from agentenvs.rollout.inspect.options import CheckOptions

    with friendly_errors():
        if health not in ("fail", "warn"):
            raise CLIError(f"--health takes fail or warn, not {health!r}")
        against_store = _against_store(against)
        options = CheckOptions(
            current_version=current_version,
            max_staleness=max_staleness,
            text_trainer=text_trainer,
            max_tool_parse_failures=max_tool_parse_failures,
            replay=replay,
            require_verified=require_verified,
            health=_health(health),
            against_version=None if against_store is not None else against,
        )
        report = _run(file, options, _Sources(tokenizer, store, drift, against_store, card),
                      rescore, rescore_dtype)  # fmt: skip
    print_report(report, file, json_output)
    if not report.ok:
        raise typer.Exit(EXIT_FAILED_GROUPS)


def _health(value: str) -> Literal["fail", "warn"]:
    return "warn" if value == "warn" else "fail"


def _against_store(against: str | None) -> Path | None:
    """``--against`` names a store when it is a file; a version otherwise (a value that
    looks like a path but names no file is refused)."""
    if against is None:
        return None
    path = Path(against).expanduser()
    if path.is_file():
        return path
    if "/" in against or against.endswith((".jsonl", ".json")):
        raise CLIError(f"cannot read {against}: no such file")
    return None


@dataclass(frozen=True)
class _Sources:
    """The files and names a check reads besides FILE."""

    tokenizer: str | None
    store: Path | None
    drift: Path | None
    against: Path | None
    card: str | None


def _run(file: Path, options: Any, sources: _Sources, rescore: str | None, dtype: str) -> Any:
    from agentenvs.rollout.cli.check_sources import check_a_store, readable_kind, rescorer_for
    from agentenvs.rollout.inspect.check import check_handoff
    from agentenvs.rollout.inspect.vocab import load_check_tokenizer

    kind = readable_kind(file)
    rescorer = rescorer_for(rescore, dtype)
    try:
        if kind == "trajectories":
            return check_a_store(file, options, sources, rescorer)
        if sources.card is not None:
            raise CLIError("--card compares a trajectory store, not a hand-off")
        if sources.against is not None:
            raise CLIError("--against STORE compares trajectory stores, not a hand-off")
        if sources.store is not None and not sources.store.is_file():
            raise CLIError(f"cannot read {sources.store}: no such file")
        tok = _tokenizer(load_check_tokenizer, sources.tokenizer) if sources.tokenizer else None
        if tok is None and sources.store is not None:
            from agentenvs.rollout.cli.check_sources import store_tokenizer

            tok = store_tokenizer(sources.store, None)
        return check_handoff(file, kind, options, tokenizer=tok, reference=sources.store,
                             rescorer=rescorer)  # fmt: skip
    except (ValueError, KeyError) as error:
        text = one_line(str(error))
        raise CLIError(text if text.startswith(str(file)) else f"{file}: {text}") from None


def _tokenizer(loader: Any, spec: str) -> Any:
    try:
        return loader(spec)
    except Exception as error:  # transformers raises OSError, ValueError, ...
        raise CLIError(f"cannot load tokenizer {spec!r}: {one_line(str(error))[:300]}") from None


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
