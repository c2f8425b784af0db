"""``agentenvs list``: every registered environment (with its presets), what it needs
that is not installed (and the ``pip install`` line that brings it), and why an
unloadable one fails.

It reads the registry's metadata and the cards of the shipped environments
(:mod:`agentenvs.envs.catalogue`), so it imports no environment: a config is imported
only for an entry point without a card (a plugin).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Annotated

import typer
from rich.table import Table

from agentenvs.rollout.cli.common import out


@dataclass
class EnvRow:
    name: str
    gym_id: str | None
    entry_point: str
    description: str
    available: bool
    error: str | None = None
    """Why it cannot run here: its import error, or what it needs (with the install line)."""
    presets: list[str] = field(default_factory=list)
    """The environment's own presets (``--set preset=NAME``; ``agentenvs preset show NAME``)."""
    missing: list[str] = field(default_factory=list)
    """Modules it needs that are not installed (``EnvConfig.requires``)."""
    install: str | None = None
    """The command that installs them: ``pip install 'agentenvs[retool]'``."""


def registered_envs() -> list[EnvRow]:
    """Every entry point of the ``agentenvs.envs`` group, loadable or not."""
    from agentenvs.envs.catalogue import env_cards
    from agentenvs.envs.requirements import install_line

    rows = []
    for card in env_cards():
        gone = list(card.missing)
        rows.append(
            EnvRow(
                card.name,
                card.gym_id or None,
                card.reference,
                card.summary,
                card.available,
                card.why_unavailable(),
                list(card.presets),
                [r.module for r in gone],
                install_line(gone) if gone else None,
            )
        )
    return rows


def list_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead.")] = False,
) -> None:
    """List registered environments (the agentenvs.envs entry-point group) and their presets."""
    rows = registered_envs()
    if as_json:
        sys.stdout.write(json.dumps([row.__dict__ for row in rows]) + "\n")
        return
    if out.width >= _table_width(rows):
        out.print(_table(rows))
    else:
        _print_narrow(rows)


def _table_width(rows: list[EnvRow]) -> int:
    """The width a table needs to show each entry point whole on one line (and at
    least 30 columns of description): identifiers must not be split to fit."""
    widest = [
        max((len(getattr(row, name) or "") for row in rows), default=0)
        for name in ("name", "gym_id", "entry_point")
    ]
    presets = max((len(_presets(row)) for row in rows), default=0)
    return max(widest[0], 4) + max(widest[1], 6) + max(widest[2], 11) + max(presets, 7) + 30 + 16


def _presets(row: EnvRow) -> str:
    return ", ".join(row.presets)


def _table(rows: list[EnvRow]) -> Table:
    from rich.markup import escape

    table = Table(title="agentenvs environments")
    table.add_column("name", no_wrap=True)
    table.add_column("gym id", no_wrap=True)
    table.add_column("entry point", no_wrap=True)
    table.add_column("presets", no_wrap=True)
    table.add_column("description")  # wraps between words
    for row in rows:
        if row.available:
            table.add_row(
                row.name, row.gym_id or "", row.entry_point, _presets(row), row.description
            )
        elif row.missing:  # described, but it cannot run here until its extra is installed
            table.add_row(
                f"[dim]{row.name}[/dim]",
                row.gym_id or "",
                f"[dim]{row.entry_point}[/dim]",
                _presets(row),
                f"{escape(row.description)} [red]needs {', '.join(row.missing)}:[/red] "
                f"{escape(row.install or '')}",
            )
        else:
            table.add_row(
                f"[dim]{row.name}[/dim]",
                "",
                f"[dim]{row.entry_point}[/dim]",
                "",
                f"[red]not loadable:[/red] {escape(row.error or '')}",
            )
    return table


def _print_narrow(rows: list[EnvRow]) -> None:
    """One block per environment for a terminal too narrow for the table: the name and
    gym id, then the description and the entry point on lines of their own."""
    from rich.padding import Padding
    from rich.text import Text

    out.print(Text("agentenvs environments", style="bold"))
    for row in rows:
        head = Text(row.name, style="bold" if row.available else "dim")
        head.append(f"  {row.gym_id}" if row.gym_id else "  (not loadable)")
        out.print(head)
        about = row.description if row.gym_id else f"not loadable: {row.error}"
        out.print(Padding(Text(about), (0, 0, 0, 2)))
        if row.missing:
            needs = f"needs {', '.join(row.missing)}: {row.install}"
            out.print(Padding(Text(needs, style="red"), (0, 0, 0, 2)))
        if row.presets:
            out.print(Padding(Text(f"presets {_presets(row)}"), (0, 0, 0, 2)))
        out.print(Padding(Text(f"entry point {row.entry_point}", style="dim"), (0, 0, 0, 2)))
