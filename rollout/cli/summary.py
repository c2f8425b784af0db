"""The end-of-run summary of ``agentenvs rollout`` (and the demo): what a researcher
looks at first. Besides counts and the reward mean, it shows the spread of rewards,
the share of groups with one reward for every trajectory (zero advantage: no
learning signal), and how fast the run went (elapsed, episodes/s, tokens/s). A
statistic there is nothing to compute from (no trajectory) shows as ``-``."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def throughput(records: list, elapsed: float) -> dict[str, float]:
    """Wall time of the collection and what it produced per second."""
    episodes = sum(len(r.group.trajectories) for r in records if r.group is not None)
    tokens = sum(
        len(t.ac.tokens)
        for r in records
        if r.group is not None
        for traj in r.group.trajectories
        for t in traj.transitions
    )
    rate = 1.0 / elapsed if elapsed > 0 and episodes else None
    return {
        "elapsed_s": round(elapsed, 3),
        "episodes_per_s": None if rate is None else round(episodes * rate, 3),
        "tokens_per_s": None if rate is None else round(tokens * rate, 1),
    }


def tool_calls_summary(records: list) -> dict[str, Any]:
    """``tool_calls``: per tool environment, calls per episode, successes and failures by
    status (``inspect/tool_checks.py``); nothing for a run without tool environments."""
    from agentenvs.rollout.inspect.tool_checks import tool_summary

    summary = tool_summary(records)
    return {"tool_calls": summary} if summary else {}


_SUMMARY_ROWS: tuple[tuple[str, str, str], ...] = (
    ("groups", "groups", "{}"),
    ("ok", "ok", "{}"),
    ("failed", "failed", "{}"),
    ("skipped", "skipped (already stored)", "{}"),
    ("trajectories", "trajectories", "{}"),
    ("elapsed_s", "elapsed", "{:.1f} s"),
    ("episodes_per_s", "episodes/s", "{:.2f}"),
    ("tokens_per_s", "sampled tokens/s", "{:.0f}"),
    ("mean_turns", "mean turns", "{:.2f}"),
    ("tokens_sampled", "tokens sampled", "{}"),
    ("retried_groups", "retried groups", "{}"),
)


def _shown(form: str, value: Any) -> str:
    """The value in its format; ``-`` for a statistic that does not exist (no data)."""
    return "-" if value is None else form.format(value)


def summary_table(summary: dict[str, Any], title: str = "rollout summary") -> Table:
    table = Table(title=title, show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    for key, label, form in _SUMMARY_ROWS:
        if key in summary:
            table.add_row(label, _shown(form, summary[key]))
        if key == "trajectories" and "mean_reward" in summary:
            spread = summary.get("reward_std")
            table.add_row(
                "reward mean ± std",
                _shown("{:.4f}", summary["mean_reward"])
                + ("" if spread is None else f" ± {spread:.4f}"),
            )
            if "zero_advantage_share" in summary:
                share = summary["zero_advantage_share"]
                table.add_row(
                    "zero-advantage groups",
                    "-" if share is None else f"{share:.0%} (constant reward: no learning signal)",
                )
    stops = summary.get("stop_reasons") or {}
    table.add_row("stop reasons", ", ".join(f"{k}: {v}" for k, v in stops.items()) or "-")
    if summary.get("tool_calls"):
        from agentenvs.rollout.inspect.tool_checks import describe_summary

        table.add_row("tool calls", describe_summary(summary["tool_calls"]))
    if "out" in summary:
        table.add_row("written to", str(summary["out"]))
    return table
