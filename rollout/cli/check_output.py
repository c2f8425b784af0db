"""What ``agentenvs check`` prints: the findings table, the verdict, the JSON object.

The verdict says which kind of finding failed (data integrity, run health, or both),
so a random-model run whose only failure is "no tool call attempted" reads as what
it is (``--health warn`` downgrades that kind).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from agentenvs.rollout.cli.common import out

_STATUS_STYLE = {
    "pass": "green",
    "fail": "bold red",
    "warn": "yellow",
    "info": "cyan",
    "skip": "dim",
}
_KIND_WORDS = {"integrity": "data integrity", "health": "run health"}


def verdict_line(report: Any) -> str:
    """``all checks passed``, or which kinds failed: ``checks failed: data integrity (2)``."""
    kinds = report.failed_kinds()
    if not kinds:
        return "all checks passed"
    failed = ", ".join(f"{_KIND_WORDS[k]} ({n})" for k, n in kinds.items())
    return f"checks failed: {failed}"


def findings_table(report: Any, title: str) -> Table:
    table = Table(title=title)
    for column in ("check", "status", "detail", "first offender"):
        table.add_column(column, overflow="fold")
    for finding in report.findings:
        style = _STATUS_STYLE[finding.status]
        health = " (health)" if finding.kind == "health" else ""
        table.add_row(
            f"{finding.check}{health}",
            f"[{style}]{finding.status}[/]",
            escape(finding.detail),
            escape(finding.where),
        )
    return table


def verdict_table(report: Any) -> Table:
    """The verdict and the counts behind it, as a table (not a Python dict)."""
    verdict = verdict_line(report)
    style = "green" if report.ok else "bold red"
    table = Table(show_header=False, title=f"[{style}]{escape(verdict)}[/]")
    table.add_column("", style="bold")
    table.add_column("", justify="right")
    statuses = Counter(f.status for f in report.findings)
    for status in ("fail", "warn", "pass", "info", "skip"):
        if statuses[status]:
            table.add_row(f"checks {status}", str(statuses[status]))
    for key, value in report.stats.items():
        table.add_row(str(key).replace("_", " "), str(value))
    return table


def print_report(report: Any, file: Path, json_output: bool) -> None:
    if json_output:
        payload = {
            "source": report.source,
            "kind": report.kind,
            "ok": report.ok,
            "verdict": verdict_line(report),
            "failed_kinds": report.failed_kinds(),
            "stats": report.stats,
            "findings": [vars(f) for f in report.findings],
        }
        sys.stdout.write(json.dumps(payload, sort_keys=True) + "\n")
        return
    out.print(findings_table(report, f"agentenvs check: {file} ({report.kind})"))
    out.print(verdict_table(report))
