"""``agentenvs list``: every registered environment, and why an unloadable one fails."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
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


def registered_envs() -> list[EnvRow]:
    """Every entry point of the ``agentenvs.envs`` group, loadable or not."""
    from importlib.metadata import entry_points

    from agentenvs.envs.registry import ENTRY_POINT_GROUP, config_class, list_envs

    rows = {
        info.name: EnvRow(info.name, info.gym_id, info.target, info.description, True)
        for info in list_envs()
    }
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in rows:
            continue
        try:
            config_class(point.name)
            problem = "loads now but failed during listing"
        except Exception as error:
            problem = one_line(f"{type(error).__name__}: {error}")
        rows[point.name] = EnvRow(point.name, None, point.value, "", False, problem)
    return [rows[name] for name in sorted(rows)]


def list_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead.")] = False,
) -> None:
    """List registered environments (the agentenvs.envs entry-point group)."""
    rows = registered_envs()
    if as_json:
        sys.stdout.write(json.dumps([row.__dict__ for row in rows]) + "\n")
        return
    table = Table(title="agentenvs environments")
    table.add_column("name", no_wrap=True)
    table.add_column("gym id", no_wrap=True)
    table.add_column("entry point", overflow="fold")
    table.add_column("description", overflow="fold")
    for row in rows:
        if row.available:
            table.add_row(row.name, row.gym_id or "", row.entry_point, row.description)
        else:
            table.add_row(
                f"[dim]{row.name}[/dim]",
                "",
                f"[dim]{row.entry_point}[/dim]",
                f"[red]not loadable:[/red] {row.error}",
            )
    out.print(table)
