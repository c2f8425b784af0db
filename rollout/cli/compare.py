"""``agentenvs compare A B [C ...]``: are two runs comparable, and is their difference real?

Comparability is checked first and decides the exit code: 1 when the runs differ in
a setting ``--allow`` does not accept (the differences are printed, the result is
not), 0 when the result is shown, 2 for bad input (a file that is not a run, an
unknown ``--allow`` name). The work is :func:`agentenvs.rollout.compare.compare_runs`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from agentenvs.rollout.cli.common import CLIError, fail, friendly_errors, one_line, out

EXIT_NOT_COMPARABLE = 1


def compare_command(
    files: Annotated[
        list[Path],
        typer.Argument(
            metavar="A B [C ...]",
            help="Trajectory stores (or JSONL hand-offs); the first is the baseline.",
        ),
    ],
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow",
            metavar="SETTINGS",
            help="Differences to accept, comma-separated: env, split, panel, config, budget, "
            "sampling, renderer, template, tokenizer, group_size, policy, weights, provenance.",
        ),
    ] = None,
    resamples: Annotated[
        int, typer.Option(metavar="N", help="Bootstrap resamples for the interval.")
    ] = 2000,
    seed: Annotated[int, typer.Option(metavar="S", help="Seed of the bootstrap.")] = 0,
    level: Annotated[float, typer.Option(metavar="P", help="Interval level, e.g. 0.95.")] = 0.95,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead.")] = False,
    png: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Write the plot as a PNG (matplotlib).")
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Write a self-contained HTML page with the plot."),
    ] = None,
) -> None:
    """Compare runs on the same test panel and budget: differences first, then the result."""
    from agentenvs.rollout.compare import compare_runs
    from agentenvs.rollout.compare.comparability import UnknownSettingError
    from agentenvs.rollout.compare.plot_png import PlotUnavailableError

    with friendly_errors():
        if len(files) < 2:
            raise CLIError("compare needs at least two runs (A B [C ...])")
        if resamples < 1:
            raise CLIError(f"--resamples must be at least 1, got {resamples}")
        if not 0 < level < 1:
            raise CLIError(f"--level must be between 0 and 1, got {level}")
        try:
            comparison = compare_runs(
                files, allow=allow or [], resamples=resamples, seed=seed, level=level
            )
        except (UnknownSettingError, ValueError) as error:
            raise CLIError(one_line(str(error))) from None
        try:
            if html is not None:
                from agentenvs.rollout.compare.plot_page import write_page

                write_page(comparison, html)
            if png is not None:  # refused or unpaired: the reward histograms alone
                from agentenvs.rollout.compare.plot_png import write_png

                write_png(comparison, png)
        except PlotUnavailableError as error:
            raise CLIError(str(error)) from None
    if as_json:
        sys.stdout.write(json.dumps(comparison.to_json(), sort_keys=True, default=str) + "\n")
        sys.stdout.flush()
    else:
        from agentenvs.rollout.compare.tables import comparison_view

        out.print(comparison_view(comparison))
    refused = comparison.comparability.refused
    if refused:
        names = ",".join(refused)
        raise fail(
            f"the runs are not comparable: they differ in {', '.join(refused)} (listed above); "
            f"pass --allow {names} if that is the point of the comparison",
            EXIT_NOT_COMPARABLE,
        )
