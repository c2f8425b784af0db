"""``agentenvs preset``: the presets that reproduce a published setup, their trainer
settings for verl / TRL / the Tinker cookbook, and their reproduction cards.

Nothing here imports an environment except ``card`` (which renders the panel's first
prompts), so ``list`` and ``show`` answer at once.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from agentenvs.rollout.cli.common import CLIError, friendly_errors, load_tokenizer_or_fail, out

app = typer.Typer(
    name="preset",
    help="Presets that reproduce a published setup: list, show (trainer settings), card.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


def presets_epilog() -> str:
    """The presets, one per line, for ``agentenvs rollout --help``."""
    from agentenvs.rollout.presets import PRESETS

    lines = [f"  {e.env} --set preset={e.name}: {e.summary}" for e in PRESETS.values()]
    return "\b\nPresets (agentenvs preset show NAME prints the trainer's half):\n" + "\n".join(
        lines
    )


def _entry(name: str):
    from agentenvs.rollout.presets import UnknownPresetError, preset

    try:
        return preset(name)
    except UnknownPresetError as error:
        raise CLIError(str(error)) from None


@app.command("list")
def list_presets(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead.")] = False,
) -> None:
    """Every preset: its environment and the original it reproduces."""
    from agentenvs.rollout.presets import PRESETS

    rows = [
        {
            "name": e.name,
            "env": e.env,
            "original": f"{e.half.original.repo}@{e.half.original.commit}",
            "script": e.half.original.script,
            "summary": e.summary,
        }
        for e in PRESETS.values()
    ]
    if as_json:
        sys.stdout.write(json.dumps(rows) + "\n")
        return
    table = Table(title="agentenvs presets")
    for column in ("name", "env", "original", "script"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row["name"], row["env"], row["original"], row["script"])
    out.print(table)


@app.command("show")
def show_preset(
    name: Annotated[str, typer.Argument(metavar="NAME", help="A preset (agentenvs preset list).")],
    target: Annotated[
        str,
        typer.Option(metavar="all|verl|trl|cookbook", help="Which trainer's settings to print."),
    ] = "all",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object instead.")] = False,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="The sheet docs/presets.md shows, in Markdown.")
    ] = False,
) -> None:
    """The original's trainer settings (each with its source line), and the same as verl
    overrides, TRL GRPOConfig kwargs and Tinker cookbook config fields, each with the batch
    they make in rows (rows per optimiser step, optimiser steps per batch)."""
    from agentenvs.rollout.presets.batches import original_figures
    from agentenvs.rollout.presets.emit import TARGETS, emit, verl_command_line

    with friendly_errors():
        entry = _entry(name)
        if target != "all" and target not in TARGETS:
            raise CLIError(f"--target must be all or one of {', '.join(TARGETS)}, not {target!r}")
    half = entry.half
    if markdown:
        from agentenvs.rollout.presets.sheet import preset_sheet

        sys.stdout.write(preset_sheet(half))
        return
    chosen = TARGETS if target == "all" else (target,)
    emitted = {t: emit(half, t) for t in chosen}
    if as_json:
        payload = {
            "preset": entry.name,
            "env": entry.env,
            "original": vars(half.original),
            "knobs": [vars(k) for k in half.knobs],
            "notes": list(half.notes),
            "batch": original_figures(half).to_json(),
            **{t: e.to_json() for t, e in emitted.items()},
        }
        sys.stdout.write(json.dumps(payload) + "\n")
        return
    original = half.original
    table = Table(title=f"preset {entry.name}: {original.repo}@{original.commit} {original.script}")
    for column in ("setting", "value", "source", "note"):
        table.add_column(column, overflow="fold")
    for knob in half.knobs:
        table.add_row(knob.name, escape(json.dumps(knob.value)), knob.source, escape(knob.note))
    out.print(table)
    out.print(f"batch: {original_figures(half).describe()}")
    out.print(f"model: {original.model}")
    out.print(f"environment: agentenvs rollout {entry.env} --set preset={entry.name}")
    for note in half.notes:
        out.print(f"note: {escape(note)}")
    for t, e in emitted.items():
        out.print(f"\n[bold]{t}[/bold]")
        if t == "verl":
            lines = ["python3 -m verl.trainer.main_ppo", *verl_command_line(e)]
            out.print(escape(" \\\n    ".join(lines)))
        else:
            out.print(escape(json.dumps(e.settings, indent=2)))
        out.print(f"  batch: {e.batch.figures.describe()}")
        if e.batch.differs:
            out.print(f"  batch differs: {escape(e.batch.differs)}")
        for product, value in e.batch.requires.items():
            out.print(f"  set {product} = {value}")
        for knob, why in e.left_out.items():
            out.print(f"  not set: {knob}: {escape(why)}")


@app.command("card")
def card_command(
    name: Annotated[str, typer.Argument(metavar="NAME", help="A preset (agentenvs preset list).")],
    tokenizer: Annotated[
        str, typer.Option(metavar="builtin|DIR", help="Tokenizer the first prompts are made with.")
    ] = "builtin",
    tasks: Annotated[int, typer.Option(metavar="N", help="Tasks on the panel.")] = 8,
    split: Annotated[str, typer.Option(metavar="SPLIT", help="Split of the panel.")] = "train",
) -> None:
    """The preset's reproduction card (JSON): hashes of the task panel, data, prompt
    strings, chat template and reward function, and the scripted oracle's reward band.
    ``agentenvs check --card NAME STORE`` compares a store with it."""
    from agentenvs.rollout.presets.card import compute_card

    with friendly_errors():
        _entry(name)
        tok = load_tokenizer_or_fail(tokenizer)
        try:
            card = compute_card(name, tok, split=split, count=tasks)
        except (ValueError, KeyError) as error:
            raise CLIError(f"card {name}: {error}") from None
    sys.stdout.write(json.dumps(card, sort_keys=True) + "\n")
