"""``agentenvs list``: every registered environment (with its presets), and why an
unloadable one fails."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Annotated

import typer
from rich.table import Table

from agentenvs.rollout.cli.common import one_line, out


@dataclass
class EnvRow:
    name: str
    gym_id: str | None
    entry_point: str
    description: str
    available: bool
    error: str | None = None
    presets: list[str] = field(default_factory=list)
    """The environment's own presets (``--set preset=NAME``; ``agentenvs preset show NAME``)."""


def registered_envs() -> list[EnvRow]:
    """Every entry point of the ``agentenvs.envs`` group, loadable or not."""
    from agentenvs.envs.registry import ENVIRONMENTS, config_class, list_envs

    rows = {
        info.name: EnvRow(
            info.name,
            info.gym_id,
            info.target,
            info.description,
            True,
            presets=sorted(config_class(info.name).presets),
        )
        for info in list_envs()
    }
    for name, reference in ENVIRONMENTS.references().items():
        if name in rows:
            continue
        try:
            config_class(name)
            problem = "loads now but failed during listing"
        except Exception as error:
            problem = one_line(f"{type(error).__name__}: {error}")
        rows[name] = EnvRow(name, None, reference, "", False, problem)
    return [rows[name] for name in sorted(rows)]


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
        else:
            table.add_row(
                f"[dim]{row.name}[/dim]",
                "",
                f"[dim]{row.entry_point}[/dim]",
                "",
                f"[red]not loadable:[/red] {row.error}",
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
        about = row.description if row.available else f"not loadable: {row.error}"
        out.print(Padding(Text(about), (0, 0, 0, 2)))
        if row.presets:
            out.print(Padding(Text(f"presets {_presets(row)}"), (0, 0, 0, 2)))
        out.print(Padding(Text(f"entry point {row.entry_point}", style="dim"), (0, 0, 0, 2)))
