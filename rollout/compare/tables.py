"""The terminal form of a comparison: comparability first, then the runs side by side, then
the paired difference with its interval. A statistic with nothing behind it shows ``-``."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from agentenvs.rollout.compare.report import Comparison
from agentenvs.rollout.compare.stats import Interval


def comparability_table(comparison: Comparison) -> Table:
    check = comparison.comparability
    table = Table(title="comparability (each run against the first)", show_header=True)
    for column in ("setting", "difference", "verdict"):
        table.add_column(column, overflow="fold")
    for difference in check.differences:
        accepted = difference.setting in check.allowed
        table.add_row(
            difference.setting,
            difference.detail,
            "accepted (--allow)" if accepted else "REFUSED",
        )
    if not check.differences:
        base = comparison.runs[0]
        split = base.settings.get("split") or "-"
        table.add_row(
            "all",
            f"same panel ({len(base.panel)} tasks, split {split}), env config, budget, sampling, "
            "renderer, template, tokenizer, group size, policy and weights",
            "comparable",
        )
    for note in check.notes:
        table.add_row("note", note, "")
    return table


def _number(value: Any, form: str = "{:.4f}") -> str:
    return "-" if value is None else form.format(value)


_ROWS: tuple[tuple[str, str, str], ...] = (
    ("tasks", "tasks with an outcome", "{}"),
    ("groups", "groups", "{}"),
    ("failed", "failed groups", "{}"),
    ("trajectories", "trajectories", "{}"),
    ("mean_reward", "mean reward", "{:.4f}"),
    ("reward_std", "reward std", "{:.4f}"),
    ("success_rate", "success rate", "{:.1%}"),
    ("zero_advantage_share", "zero-advantage groups", "{:.0%}"),
    ("mean_turns", "mean turns", "{:.2f}"),
    ("mean_tokens", "mean sampled tokens", "{:.1f}"),
)


def runs_table(comparison: Comparison) -> Table:
    table = Table(title="runs")
    table.add_column("", style="bold")
    for run in comparison.runs:
        table.add_column(run.label, overflow="fold")
    for key, label, form in _ROWS:
        table.add_row(label, *(_number(s.get(key), form) for s in comparison.statistics))
    table.add_row(
        "stop reasons",
        *(
            ", ".join(f"{k}: {v}" for k, v in (s.get("stop_reasons") or {}).items()) or "-"
            for s in comparison.statistics
        ),
    )
    table.add_row(
        "weights", *("; ".join(w.label() for w in r.weights) or "-" for r in comparison.runs)
    )
    table.add_row("success counted as", *(r.success_rule for r in comparison.runs))
    return table


def _interval(value: Interval, percent: bool = False) -> str:
    form = "{:+.1%}" if percent else "{:+.4f}"
    inner = "{:.1%}" if percent else "{:.4f}"
    return (
        f"{form.format(value.mean)} [{inner.format(value.low)}, {inner.format(value.high)}]: "
        f"{value.verdict}"
    )


def paired_table(comparison: Comparison) -> Table:
    level = f"{comparison.level:.0%}"
    table = Table(
        title=f"paired by task ({level} interval, paired bootstrap over tasks: "
        f"{comparison.resamples} resamples, seed {comparison.seed})"
    )
    table.add_column("", style="bold")
    table.add_column("difference", overflow="fold")
    for pair in comparison.paired:
        name = f"{pair.other} − {pair.baseline}"
        table.add_row(name, "")
        table.add_row("  mean reward", _interval(pair.reward))
        table.add_row("  success rate", _interval(pair.success, percent=True))
        table.add_row(
            "  tasks won / lost / tied",
            f"{pair.wins} / {pair.losses} / {pair.ties} of {len(pair.tasks)} paired"
            + (f" ({pair.unpaired} unpaired: an outcome in one run only)" if pair.unpaired else ""),
        )
    return table


def comparison_view(comparison: Comparison) -> Group:
    """Everything ``agentenvs compare`` prints, in reading order."""
    parts: list[Any] = [comparability_table(comparison), runs_table(comparison)]
    if comparison.paired:
        parts.append(paired_table(comparison))
    else:
        refused = ", ".join(comparison.comparability.refused)
        parts.append(
            Text(f"not compared: the runs differ in {refused}; --allow {refused} accepts that")
        )
    return Group(*parts)
