"""``agentenvs view``: a store's trajectories in the terminal (paged) or as one HTML page."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from agentenvs.rollout.cli.common import (
    CLIError,
    friendly_errors,
    load_view_tokenizer,
    out,
    read_store_warning,
)
from agentenvs.rollout.cli.options import DecodeTokenizer


def view_command(
    file: Annotated[
        Path,
        typer.Argument(metavar="FILE", help="Trajectory JSONL written by `agentenvs rollout`."),
    ],
    html_out: Annotated[
        Path | None,
        typer.Option("--html", metavar="OUT.html", help="Write a self-contained HTML page here."),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(metavar="INDEX|KEY", help="Show only this group: 0-based index or its key."),
    ] = None,
    limit: Annotated[
        int | None, typer.Option(metavar="N", help="Show only the first N groups.")
    ] = None,
    tokenizer: DecodeTokenizer = None,
    no_pager: Annotated[
        bool,
        typer.Option("--no-pager", help="Print straight to the terminal instead of a pager."),
    ] = False,
) -> None:
    """Show trajectories: sampled tokens vs masked prompt/environment tokens, rewards, metrics."""
    from agentenvs.rollout.inspect.terminal_view import render_terminal
    from agentenvs.rollout.inspect.viewer import render_html, select_groups

    with friendly_errors():
        records = read_store_warning(file).latest()
        if not records:  # as `agentenvs check` fails it: there is nothing to look at
            raise CLIError(f"{file}: no trajectory records in the file")
        shown = select_groups(records, group, limit)  # validates before loading a tokenizer
        tok, spec = load_view_tokenizer(records, tokenizer)
        if html_out is not None:
            page = render_html(
                records, tok, source=str(file), group=group, limit=limit, tokenizer_name=spec
            )
            if html_out.parent != Path():
                html_out.parent.mkdir(parents=True, exist_ok=True)
            html_out.write_text(page, encoding="utf-8")
            out.print(f"wrote {html_out} ({len(shown)} group(s), {len(page) // 1024} KiB)")
            return
        if no_pager or not sys.stdout.isatty():
            render_terminal(records, tok, out, source=str(file), group=group, limit=limit)
            return
        from agentenvs.rollout.inspect.pager import ColourPager

        with out.pager(ColourPager(), styles=True):  # $PAGER, else less -FRX; colours kept
            render_terminal(records, tok, out, source=str(file), group=group, limit=limit)
