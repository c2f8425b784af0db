"""A store's trajectories printed to a rich console (``agentenvs view`` without ``--html``).

Sampled tokens are bold cyan, prompt tokens grey, environment tokens yellow, and
each turn starts on its own line with a ``[turn N]`` marker. Without colour (output
piped to a file, ``NO_COLOR``, a dumb terminal) the kinds are told apart by text:
sampled text sits between ``⟦`` and ``⟧`` (the only tokens trained on), prompt and
environment text have no brackets, and each span of them starts with its kind
(``«prompt»``, ``«env»``). A failed group shows its whole error, each attempt on a line,
and the last error's traceback when the record has one.

A real run prints tens of thousands of lines, so the command pages the output
(:mod:`pager`) and ``--group``/``--limit`` choose what to print; this module only
renders what it is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.inspect.tool_checks import describe_counts, episode_tool_counts
from agentenvs.rollout.inspect.viewer import (
    GroupView,
    SpanKind,
    TrajectoryView,
    end_of_turn,
    group_view,
    overview,
    select_groups,
)

STYLES: dict[SpanKind, str] = {
    "prompt": "grey50",
    "env": "yellow",
    "sampled": "bold cyan",
}


LABELS: dict[SpanKind, str] = {"prompt": "prompt", "env": "environment", "sampled": "sampled"}


@dataclass(frozen=True)
class Marks:
    """How span kinds are told apart in text when there is no colour."""

    open_sampled: str
    close_sampled: str
    prompt: str
    env: str

    def mark(self, kind: SpanKind, text: str) -> str:
        """Sampled text between brackets; masked text after its kind's label."""
        if kind == "sampled":
            return f"{self.open_sampled}{text}{self.close_sampled}"
        return (self.prompt if kind == "prompt" else self.env) + text


UNICODE_MARKS = Marks("⟦", "⟧", "«prompt»", "«env»")
ASCII_MARKS = Marks("[[", "]]", "<<prompt>>", "<<env>>")


def text_marks(console: Any) -> Marks | None:
    """Marks to print when the console shows no colour (piped, ``NO_COLOR``), else None."""
    if console.color_system is not None and not console.no_color:
        return None
    encoding = (console.encoding or "").lower().replace("-", "")
    return UNICODE_MARKS if encoding.startswith("utf") else ASCII_MARKS


_NEXT_ATTEMPT = re.compile(r"; (?=attempt \d+: )")


def error_lines(error: str) -> list[str]:
    """A failed group's error with each attempt on its own line (the record joins
    them with ``; `` into one line)."""
    head, sep, rest = error.partition(": attempt 1: ")
    if not sep:
        return error.splitlines() or [error]
    return [head + ":", *("  " + a for a in _NEXT_ATTEMPT.split("attempt 1: " + rest))]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def render_terminal(
    records: list[GroupRecord],
    tokenizer: Any,
    console: Any,
    *,
    source: str = "",
    group: int | str | None = None,
    limit: int | None = None,
) -> None:
    """Print the file's headline numbers, then the selected groups."""
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    selected = select_groups(records, group, limit)
    summary = overview(records)
    head = Table.grid(padding=(0, 2))
    head.add_row("file", Text(source))
    head.add_row("envs", Text(", ".join(summary["envs"]) or "-"))
    head.add_row(
        "groups",
        f"{summary['groups']} ({summary['ok']} ok, {summary['failed']} failed), "
        f"{summary['trajectories']} trajectories",
    )
    mean = summary["mean_reward"]
    head.add_row("mean reward", "-" if mean is None else f"{mean:.4f}")
    head.add_row("advantages", Text("; ".join(summary["estimators"]) or "none stored"))
    head.add_row(
        "stop reasons", Text(", ".join(f"{k}: {v}" for k, v in summary["stop_reasons"].items()))
    )
    if summary.get("tool_calls"):
        head.add_row("tool calls", Text(summary["tool_calls"]))
    if len(selected) < len(records):
        head.add_row("showing", f"{len(selected)} of {len(records)} groups")
    console.print(Panel(head, title="trajectories", expand=False), soft_wrap=False)
    marks = text_marks(console)
    legend = Text()
    for kind in ("prompt", "env", "sampled"):
        label = LABELS[kind]  # type: ignore[index]
        if marks is not None:
            label = marks.mark(kind, "sampled" if kind == "sampled" else "")  # type: ignore[arg-type]
        legend.append(label, STYLES[kind])  # type: ignore[index]
        legend.append("  " if kind != "sampled" else " (trained on; the rest is masked)")
    console.print(legend)
    note = end_of_turn([r for _, r in selected], tokenizer).note()
    if note:
        console.print(Text(note, style="dim"))

    for index, record in selected:
        view = group_view(tokenizer, record, index)
        title = Text(f"group {view.index}  key {view.key}  task {view.task_id}  ({view.status})")
        console.rule(title)
        if view.status != "ok":
            _print_failure(console, view)
            continue
        advantages = record.extra.get("advantages")
        for traj in view.trajectories:
            advantage = (
                advantages[traj.index]
                if isinstance(advantages, list) and traj.index < len(advantages)
                else None
            )
            assert record.group is not None
            tools = describe_counts(episode_tool_counts(record.group.trajectories[traj.index]))
            _print_trajectory(console, traj, advantage, marks, tools)
        if view.group_metrics and any(view.group_metrics):
            console.print(Text(f"group metrics: {view.group_metrics}"))


def _print_failure(console: Any, view: GroupView) -> None:
    """The whole error, never cropped: every attempt is what a person debugs from."""
    from rich.text import Text

    lines = error_lines(view.error or "failed (no error recorded)")
    console.print(Text("\n".join(lines), style="red"), soft_wrap=False, overflow="fold")
    if view.traceback:
        console.print(Text("traceback of the last attempt:", style="bold"))
        console.print(Text(view.traceback.rstrip("\n")), soft_wrap=False, overflow="fold")


def _print_trajectory(
    console: Any,
    traj: TrajectoryView,
    advantage: float | None,
    marks: Marks | None = None,
    tools: str = "",
) -> None:
    from rich.table import Table
    from rich.text import Text

    text = Text()
    turn = None
    line_start = True  # tracked here: Text.plain joins the whole text on every call
    for span in traj.spans:
        if span.restart:
            text.append("\n[new training sample]\n", "bold red")
            line_start = True
        if span.turn is not None and span.turn != turn:
            # On a line of its own: right after an action it would read as the action's label.
            text.append(("" if line_start else "\n") + f"[turn {span.turn}]", "reverse magenta")
            text.append("\n")
            turn = span.turn
        shown = span.decoded.text if marks is None else marks.mark(span.kind, span.decoded.text)
        text.append(shown, STYLES[span.kind])  # one style per span
        line_start = shown.endswith("\n") if shown else line_start
    heading = Text(f"trajectory {traj.index}", style="bold")
    heading.append(
        f"  reward {traj.total_reward:.4g} (steps {traj.step_reward:.4g} + group "
        f"{traj.group_reward:.4g})"
        + ("" if advantage is None else f"  advantage {advantage:.4g}")
        + f"  stop {traj.stop_reason}  sampled {traj.sampled_tokens} / masked "
        f"{traj.masked_tokens} tokens"
        + (f"  {traj.samples} training samples" if traj.samples > 1 else "")
        + (f"  {tools}" if tools else "")
    )
    console.print(heading)
    console.print(text)
    table = Table(
        "turn", "action tok", "obs tok", "sampler stop", "mean logprob", "reward", "metrics"
    )
    for row in traj.turns:
        metrics = ", ".join(f"{k}={_fmt(v)}" for k, v in row.metrics.items())
        table.add_row(
            str(row.turn),
            str(row.action_tokens),
            str(row.observation_tokens) + (" (restart)" if row.restart else ""),
            Text(row.sampler_stop),
            "-" if row.mean_logprob is None else f"{row.mean_logprob:.4f}",
            _fmt(row.reward),
            Text(metrics),
        )
    console.print(table)


__all__ = ["STYLES", "GroupView", "Marks", "error_lines", "render_terminal", "text_marks"]
