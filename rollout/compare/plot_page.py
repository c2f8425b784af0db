"""The comparison as one self-contained HTML page (``agentenvs compare --html FILE``).

The charts are SVG written here (no script, no network, no plotting library), so
the page opens anywhere the viewer's pages do: the reward histogram of every run
over shared bins, and for each run against the baseline its per-task differences,
sorted, with the mean and its bootstrap interval as a band. The tables say in
numbers what the charts show.
"""

from __future__ import annotations

import itertools
from html import escape
from pathlib import Path

from agentenvs.rollout.compare.plot_png import reward_bins, run_rewards
from agentenvs.rollout.compare.report import Comparison
from agentenvs.rollout.compare.stats import Paired

WIDTH, HEIGHT, PAD = 520, 260, 40
COLOURS = ("#3b7dd8", "#e07b39", "#4aa36c", "#a45ed1", "#c9a227")


def _histogram_svg(comparison: Comparison) -> str:
    rewards = run_rewards(comparison)
    edges = reward_bins(rewards)
    counts = [[sum(lo <= r < hi or (i == len(edges) - 2 and r == hi) for r in run)
               for i, (lo, hi) in enumerate(itertools.pairwise(edges))]
              for run in rewards]  # fmt: skip
    tallest = max((c for run in counts for c in run), default=1) or 1
    bins = len(edges) - 1
    slot = (WIDTH - 2 * PAD) / bins
    bar = slot / (len(rewards) + 1)
    parts = []
    for r, run_counts in enumerate(counts):
        colour = COLOURS[r % len(COLOURS)]
        label = escape(comparison.runs[r].label)
        for b, count in enumerate(run_counts):
            height = (HEIGHT - 2 * PAD) * count / tallest
            x = PAD + b * slot + r * bar + bar / 2
            parts.append(
                f'<rect class="bar" data-run="{label}" data-count="{count}" x="{x:.1f}" '
                f'y="{HEIGHT - PAD - height:.1f}" width="{bar:.1f}" height="{height:.1f}" '
                f'fill="{colour}"><title>{label}: {count} in [{edges[b]:.3g}, '
                f"{edges[b + 1]:.3g})</title></rect>"
            )
        parts.append(
            f'<text x="{PAD + 140 * r}" y="16" fill="{colour}" font-size="12">&#9632; {label}</text>'
        )
    axis = (
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
        'stroke="#333"/>'
        f'<text x="{PAD}" y="{HEIGHT - PAD + 16}" font-size="11">{edges[0]:.3g}</text>'
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - PAD + 16}" font-size="11" text-anchor="end">'
        f"{edges[-1]:.3g}</text>"
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 6}" font-size="12" text-anchor="middle">'
        "reward per trajectory</text>"
    )
    return _svg("rewards", "".join(parts) + axis)


def _differences_svg(pair: Paired, index: int) -> str:
    order = sorted(pair.differences)
    reach = max([abs(d) for d in order] + [abs(pair.reward.low), abs(pair.reward.high), 1e-9])
    middle = HEIGHT / 2

    def y(value: float) -> float:
        return middle - (HEIGHT / 2 - PAD) * value / reach

    slot = (WIDTH - 2 * PAD) / len(order)
    parts = [
        f'<rect class="ci" x="{PAD}" y="{y(pair.reward.high):.1f}" width="{WIDTH - 2 * PAD}" '
        f'height="{max(y(pair.reward.low) - y(pair.reward.high), 1):.1f}" fill="#48c" '
        'fill-opacity="0.25"><title>interval</title></rect>'
    ]
    for i, value in enumerate(order):
        top, bottom = sorted((y(value), middle))
        parts.append(
            f'<rect class="diff" data-value="{value:.6g}" x="{PAD + i * slot + slot * 0.1:.1f}" '
            f'y="{top:.1f}" width="{slot * 0.8:.1f}" height="{max(bottom - top, 0.5):.1f}" '
            f'fill="{"#2a7" if value > 0 else "#c44"}"><title>{value:+.4f}</title></rect>'
        )
    parts.append(
        f'<line x1="{PAD}" y1="{middle}" x2="{WIDTH - PAD}" y2="{middle}" stroke="#333"/>'
        f'<line class="mean" x1="{PAD}" y1="{y(pair.reward.mean):.1f}" x2="{WIDTH - PAD}" '
        f'y2="{y(pair.reward.mean):.1f}" stroke="#248" stroke-width="1.5"/>'
        f'<text x="{PAD}" y="16" font-size="12">{escape(pair.other)} − {escape(pair.baseline)}'
        f" per task: mean {pair.reward.mean:+.4f} [{pair.reward.low:.4f}, "
        f"{pair.reward.high:.4f}]</text>"
    )
    return _svg(f"paired-{index}", "".join(parts))


def _svg(ident: str, body: str) -> str:
    return (
        f'<svg id="{ident}" width="{WIDTH}" '
        f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img">{body}</svg>'
    )


def _rows(rows: list[list[str]], header: list[str]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def comparison_page(comparison: Comparison) -> str:
    check = comparison.comparability
    differences = [
        [d.setting, d.detail, "accepted" if d.setting in check.allowed else "REFUSED"]
        for d in check.differences
    ] or [["all", "same panel, config, budget, sampling, template, group size", "comparable"]]
    differences += [["note", n, ""] for n in check.notes]
    stats_rows = [
        [key, *("-" if s.get(key) is None else f"{s[key]:.4g}" for s in comparison.statistics)]
        for key in ("mean_reward", "success_rate", "zero_advantage_share", "mean_turns",
                    "mean_tokens")
    ]  # fmt: skip
    stats_rows.append(
        ["weights", *("; ".join(w.label() for w in r.weights) or "-" for r in comparison.runs)]
    )
    paired = "".join(
        f"<p class='verdict'>{escape(p.other)} − {escape(p.baseline)}: mean reward "
        f"{p.reward.mean:+.4f} [{p.reward.low:.4f}, {p.reward.high:.4f}] "
        f"({comparison.level:.0%}, {p.reward.resamples} resamples, seed {p.reward.seed}): "
        f"{escape(p.reward.verdict)}; tasks won/lost/tied {p.wins}/{p.losses}/{p.ties}</p>"
        + _differences_svg(p, i)
        for i, p in enumerate(comparison.paired)
    )
    labels = ", ".join(r.label for r in comparison.runs)
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>agentenvs compare: {escape(labels)}</title><style>"
        "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}"
        "table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ccc;"
        "padding:3px 8px;text-align:left}svg{display:block;margin:.5em 0;background:#fafafa}"
        "</style></head><body>"
        f"<h1>agentenvs compare</h1><h2>comparability</h2>"
        f"{_rows(differences, ['setting', 'difference', 'verdict'])}"
        f"<h2>runs</h2>{_rows(stats_rows, ['', *[r.label for r in comparison.runs]])}"
        f"<h2>reward distribution</h2>{_histogram_svg(comparison)}"
        f"<h2>paired by task</h2>{paired or '<p>not compared (refused)</p>'}"
        "</body></html>"
    )


def write_page(comparison: Comparison, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(comparison_page(comparison), encoding="utf-8")
    return path
