"""A store's trajectories printed to a rich console (``agentenvs view`` without ``--html``).

Sampled tokens are bold cyan, prompt tokens grey, environment tokens yellow, and
each turn starts with a ``[turn N]`` marker. A real run prints tens of thousands
of lines, so the command pages the output and ``--group``/``--limit`` choose
what to print; this module only renders what it is given.
"""

from __future__ import annotations

from typing import Any

from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.inspect.viewer import (
    GroupView,
    SpanKind,
    TrajectoryView,
    group_view,
    overview,
    select_groups,
)

STYLES: dict[SpanKind, str] = {
    "prompt": "grey50",
    "env": "yellow",
    "sampled": "bold cyan",
}


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
    if len(selected) < len(records):
        head.add_row("showing", f"{len(selected)} of {len(records)} groups")
    console.print(Panel(head, title="trajectories", expand=False))
    legend = Text()
    for kind, label in (("prompt", "prompt"), ("env", "environment"), ("sampled", "sampled")):
        legend.append(label + ("  " if kind != "sampled" else " (trained on)"), STYLES[kind])  # type: ignore[index]
    console.print(legend)

    for index, record in selected:
        view = group_view(tokenizer, record, index)
        title = Text(f"group {view.index}  key {view.key}  task {view.task_id}  ({view.status})")
        if view.status != "ok":
            # The whole error: the history of every attempt is what a person debugs from.
            console.print(
                Panel(Text(view.error or "failed", style="red"), title=title, expand=True)
            )
            continue
        console.rule(title)
        advantages = record.extra.get("advantages")
        for traj in view.trajectories:
            advantage = (
                advantages[traj.index]
                if isinstance(advantages, list) and traj.index < len(advantages)
                else None
            )
            _print_trajectory(console, traj, advantage)
        if view.group_metrics and any(view.group_metrics):
            console.print(Text(f"group metrics: {view.group_metrics}"))


def _print_trajectory(console: Any, traj: TrajectoryView, advantage: float | None) -> None:
    from rich.table import Table
    from rich.text import Text

    text = Text()
    turn = None
    for span in traj.spans:
        if span.restart:
            text.append("\n[new training sample]\n", "bold red")
        if span.turn is not None and span.turn != turn:
            text.append(f"[turn {span.turn}]", "reverse magenta")
            turn = span.turn
        text.append(span.decoded.text, STYLES[span.kind])  # one style per span
    heading = Text(f"trajectory {traj.index}", style="bold")
    heading.append(
        f"  reward {traj.total_reward:.4g} (steps {traj.step_reward:.4g} + group "
        f"{traj.group_reward:.4g})"
        + ("" if advantage is None else f"  advantage {advantage:.4g}")
        + f"  stop {traj.stop_reason}  sampled {traj.sampled_tokens} / masked "
        f"{traj.masked_tokens} tokens"
        + (f"  {traj.samples} training samples" if traj.samples > 1 else "")
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


__all__ = ["STYLES", "GroupView", "render_terminal"]
