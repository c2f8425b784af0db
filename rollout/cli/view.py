"""``agentenvs view``: a store's trajectories in the terminal or as one HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agentenvs.rollout.cli.common import friendly_errors, load_view_tokenizer, out


def view_command(
    file: Annotated[Path, typer.Argument(help="Trajectory JSONL written by `agentenvs rollout`.")],
    html_out: Annotated[
        Path | None, typer.Option("--html", help="Write a self-contained HTML page here.")
    ] = None,
    group: Annotated[int | None, typer.Option(help="Show only this group (0-based).")] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="Tokenizer to decode with (default: the file's, else builtin)."),
    ] = None,
) -> None:
    """Show trajectories: sampled tokens vs masked prompt/environment tokens, rewards, metrics."""
    from agentenvs.rollout.inspect.viewer import (
        load_records,
        render_html,
        render_terminal,
        select_groups,
    )

    with friendly_errors():
        records = load_records(file)
        select_groups(records, group)  # validates --group before loading a tokenizer
        tok, spec = load_view_tokenizer(records, tokenizer)
        if html_out is not None:
            page = render_html(records, tok, source=str(file), group=group, tokenizer_name=spec)
            if html_out.parent != Path():
                html_out.parent.mkdir(parents=True, exist_ok=True)
            html_out.write_text(page, encoding="utf-8")
            shown = 1 if group is not None else len(records)
            out.print(f"wrote {html_out} ({shown} group(s), {len(page) // 1024} KiB)")
        else:
            render_terminal(records, tok, out, source=str(file), group=group)
