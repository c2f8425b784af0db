"""Look at stored trajectories: a self-contained HTML page, or a view in the terminal.

Both views show the token stream exactly as the policy saw it, decoded piece by
piece, so sampled tokens (the ones that carry loss) stand apart from prompt and
environment tokens (masked out). Hovering a piece in the HTML page shows its
token ids and sampler logprobs.

Reading is strict on purpose: a file that is not a trajectory store gets a
:class:`ViewerError` naming the line, because a view that silently skips broken
records would hide the thing the person came to look at. The one exception is
a torn last line, which is what a killed run leaves behind and the store itself
tolerates.
"""

from __future__ import annotations

import html
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentenvs.envs.types import Trajectory
from agentenvs.rollout.collect.records import GroupRecord

SpanKind = Literal["prompt", "env", "sampled"]
TEMPLATE_NAME = "viewer.html.j2"


class ViewerError(RuntimeError):
    """The file cannot be shown; the message says why in one line."""


# ---- reading ---------------------------------------------------------------------------


def load_records(path: str | Path) -> list[GroupRecord]:
    """Every group record of a trajectory file, in file order."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ViewerError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ViewerError(f"{path}: is a directory, not a trajectory file") from None
    except UnicodeDecodeError:
        raise ViewerError(f"{path}: not a text file (expected JSONL trajectories)") from None
    except OSError as err:
        raise ViewerError(f"{path}: cannot read ({err.strerror or err})") from None

    lines = text.splitlines()
    records: list[GroupRecord] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as err:
            if number == len(lines) and not text.endswith("\n"):
                break  # a torn last line: the run was killed while writing it
            raise ViewerError(f"{path}:{number}: not valid JSON ({err.msg})") from None
        if not isinstance(data, dict):
            raise ViewerError(f"{path}:{number}: not a trajectory record (a JSON object)")
        try:
            records.append(GroupRecord.from_json(data))
        except (KeyError, TypeError, ValueError) as err:
            detail = f"missing field {err}" if isinstance(err, KeyError) else str(err)
            raise ViewerError(f"{path}:{number}: not a trajectory record ({detail})") from None
    return records


# ---- decoding tokens into pieces ---------------------------------------------------------


@dataclass
class Piece:
    """Decoded text of one token, or of a few tokens that only decode together
    (a multi-byte character split across byte-level tokens)."""

    text: str
    token_ids: list[int]
    logprobs: list[float | None]
    special: bool = False

    def title(self) -> str:
        parts = []
        for token, lp in zip(self.token_ids, self.logprobs, strict=True):
            parts.append(f"id {token}" + ("" if lp is None else f"  logprob {lp:.4f}"))
        return "\n".join(parts)

    @property
    def min_logprob(self) -> float | None:
        values = [lp for lp in self.logprobs if lp is not None]
        return min(values) if values else None


def decode_pieces(
    tokenizer: Any, tokens: Sequence[int], logprobs: Sequence[float | None] | None = None
) -> list[Piece]:
    """Split ``tokens`` into displayable pieces whose texts concatenate to the decoding.

    Each token is decoded after a few tokens of left context (so tokenizers that
    drop a leading space on a lone token still show it); tokens that decode to an
    incomplete character are held and joined with the next ones.
    """
    if logprobs is None:
        logprobs = [None] * len(tokens)
    special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])

    def decode(ids: Sequence[int]) -> str:
        return tokenizer.decode(list(ids), skip_special_tokens=False) if ids else ""

    window = 4
    pieces: list[Piece] = []
    pending: list[int] = []
    pending_lp: list[float | None] = []
    start = 0  # index of the first pending token
    for index, (token, lp) in enumerate(zip(tokens, logprobs, strict=True)):
        if not pending:
            start = index
        pending.append(int(token))
        pending_lp.append(lp)
        context = list(tokens[max(0, start - window) : start])
        before = decode(context)
        after = decode(context + pending)
        complete = after.startswith(before) and not after.endswith("\ufffd")
        if complete or len(pending) >= 8:
            text = after[len(before) :] if after.startswith(before) else decode(pending)
            special = len(pending) == 1 and pending[0] in special_ids
            pieces.append(Piece(text, pending, pending_lp, special))
            pending, pending_lp = [], []
    if pending:
        pieces.append(Piece(decode(pending), pending, pending_lp))
    return pieces


# ---- turning records into views ----------------------------------------------------------


@dataclass
class Span:
    kind: SpanKind
    pieces: list[Piece]
    turn: int | None = None
    restart: bool = False
    """The context was rebuilt here: the template could not extend the conversation."""


@dataclass
class TurnRow:
    turn: int
    action_tokens: int
    observation_tokens: int
    sampler_stop: str
    reward: float
    metrics: dict[str, Any]
    restart: bool
    mean_logprob: float | None


@dataclass
class TrajectoryView:
    index: int
    spans: list[Span]
    turns: list[TurnRow]
    step_reward: float
    group_reward: float
    total_reward: float
    stop_reason: str | None
    sampled_tokens: int
    masked_tokens: int
    samples: int
    """Training samples the trajectory makes: one plus one per prefix break."""


@dataclass
class GroupView:
    index: int
    key: str
    env: str
    task_id: str
    status: str
    error: str | None
    attempts: int
    tags: list[str]
    group_metrics: list[dict[str, Any]]
    trajectories: list[TrajectoryView]
    provenance: dict[str, Any]
    env_config: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def mean_reward(self) -> float | None:
        rewards = [t.total_reward for t in self.trajectories]
        return sum(rewards) / len(rewards) if rewards else None


def trajectory_view(
    tokenizer: Any, traj: Trajectory, index: int, group_reward: float
) -> TrajectoryView:
    spans: list[Span] = []
    turns: list[TurnRow] = []
    context: list[int] = []
    sampled = masked = 0
    samples = 1
    for turn, tr in enumerate(traj.transitions):
        n = len(context)
        extends = n > 0 and len(tr.ob) >= n and tr.ob[:n] == context
        restart = n > 0 and not extends
        new = tr.ob[n:] if extends else tr.ob
        if restart:
            samples += 1
        if new:
            kind: SpanKind = "prompt" if turn == 0 or restart else "env"
            spans.append(Span(kind, decode_pieces(tokenizer, new), turn, restart))
        action = tr.ac.tokens
        logprobs = tr.ac.logprobs if tr.ac.logprobs is not None else [None] * len(action)
        if len(logprobs) != len(action):  # a broken record: show tokens, drop logprobs
            logprobs = [None] * len(action)
        spans.append(Span("sampled", decode_pieces(tokenizer, action, logprobs), turn))
        known = [lp for lp in logprobs if lp is not None]
        turns.append(
            TurnRow(
                turn=turn,
                action_tokens=len(action),
                observation_tokens=len(new),
                sampler_stop=str(tr.ac.stop_reason),
                reward=tr.reward,
                metrics=dict(tr.metrics),
                restart=restart,
                mean_logprob=sum(known) / len(known) if known else None,
            )
        )
        sampled += len(action)
        masked += len(new)
        context = list(tr.ob) + list(action)
    if traj.final_ob:
        n = len(context)
        extends = len(traj.final_ob) >= n and traj.final_ob[:n] == context
        tail = traj.final_ob[n:] if extends else traj.final_ob
        if tail:
            spans.append(Span("env", decode_pieces(tokenizer, tail), None, not extends))
            masked += len(tail)
    return TrajectoryView(
        index=index,
        spans=spans,
        turns=turns,
        step_reward=traj.step_reward,
        group_reward=group_reward,
        total_reward=traj.step_reward + group_reward,
        stop_reason=traj.stop_reason,
        sampled_tokens=sampled,
        masked_tokens=masked,
        samples=samples,
    )


def group_view(tokenizer: Any, record: GroupRecord, index: int) -> GroupView:
    trajectories: list[TrajectoryView] = []
    tags: list[str] = []
    group_metrics: list[dict[str, Any]] = []
    if record.group is not None:
        group = record.group
        rewards = list(group.group_rewards) + [0.0] * len(group.trajectories)
        trajectories = [
            trajectory_view(tokenizer, traj, i, rewards[i])
            for i, traj in enumerate(group.trajectories)
        ]
        tags = list(group.tags)
        group_metrics = [dict(m) for m in group.group_metrics]
    return GroupView(
        index=index,
        key=record.key,
        env=record.env,
        task_id=record.task_id,
        status=record.status,
        error=record.error,
        attempts=record.attempts,
        tags=tags,
        group_metrics=group_metrics,
        trajectories=trajectories,
        provenance=dict(record.provenance),
        env_config=dict(record.env_config),
        extra=dict(record.extra),
    )


def select_groups(records: list[GroupRecord], group: int | None) -> list[tuple[int, GroupRecord]]:
    """All records with their file index, or just group ``group`` (0-based)."""
    if group is None:
        return list(enumerate(records))
    if not 0 <= group < len(records):
        raise ViewerError(f"no group {group}: the file holds {len(records)} group(s), 0-based")
    return [(group, records[group])]


def overview(records: list[GroupRecord]) -> dict[str, Any]:
    """Headline numbers of a file, for the top of either view."""
    ok = [r for r in records if r.status == "ok" and r.group is not None]
    rewards = [x for r in ok for x in r.group.total_rewards()]  # type: ignore[union-attr]
    stops = Counter(t.stop_reason or "none" for r in ok for t in r.group.trajectories)  # type: ignore[union-attr]
    envs = sorted({r.env for r in records if r.env})
    return {
        "groups": len(records),
        "ok": len(ok),
        "failed": len(records) - len(ok),
        "trajectories": len(rewards),
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "stop_reasons": dict(sorted(stops.items())),
        "envs": envs,
    }


# ---- the tokenizer a file was made with ----------------------------------------------------


def tokenizer_spec_for(
    records: list[GroupRecord], requested: str | None
) -> tuple[str, dict[str, Any] | None]:
    """The tokenizer to decode with, and the fingerprint the file recorded for it.

    An explicit request wins; else the file's provenance: ``tokenizer.spec`` (what
    ``agentenvs rollout`` was given), else ``tokenizer.name``; else ``builtin``.
    """
    recorded: dict[str, Any] | None = None
    spec: str | None = None
    for record in records:
        entry = record.provenance.get("tokenizer")
        if isinstance(entry, dict):
            recorded = entry
            spec = entry.get("spec") or entry.get("name") or None
        elif isinstance(entry, str) and entry:
            spec = entry
        if spec:
            break
    return (requested or spec or "builtin"), recorded


# ---- HTML ------------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.4g}"
    return str(value)


def _piece_html(piece: Piece, kind: SpanKind) -> str:
    # The colour comes from the enclosing segment; a piece carries only what differs.
    attrs = f'title="{html.escape(piece.title(), quote=True)}"'
    if piece.special:
        attrs += ' class="sp"'
    lp = piece.min_logprob
    if kind == "sampled" and lp is not None and math.isfinite(lp):
        attrs += f' data-lp="{lp:.4f}"'
    return f"<span {attrs}>{html.escape(piece.text)}</span>"


def _span_html(span: Span) -> str:
    body = "".join(_piece_html(p, span.kind) for p in span.pieces)
    marker = ""
    if span.restart:
        marker = (
            '<span class="restart">new training sample: '
            "the template did not extend the conversation</span>"
        )
    turn = "" if span.turn is None else f' data-turn="{span.turn}"'
    return f'{marker}<span class="seg {span.kind}"{turn}>{body}</span>'


def render_html(
    records: list[GroupRecord],
    tokenizer: Any,
    *,
    source: str = "",
    group: int | None = None,
    tokenizer_name: str = "",
) -> str:
    """A self-contained page (inline CSS and JS, no external assets)."""
    from importlib.resources import files

    import jinja2
    from markupsafe import Markup

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["fmt"] = _fmt
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True, default=str)
    env.globals["span_html"] = lambda span: Markup(_span_html(span))
    source_text = files(__package__).joinpath(TEMPLATE_NAME).read_text(encoding="utf-8")
    template = env.from_string(source_text)
    groups = [group_view(tokenizer, rec, i) for i, rec in select_groups(records, group)]
    return template.render(
        source=source,
        summary=overview(records),
        groups=groups,
        tokenizer_name=tokenizer_name,
        selected=group,
    )


# ---- terminal ----------------------------------------------------------------------------------

_TERMINAL_STYLES: dict[SpanKind, str] = {
    "prompt": "grey50",
    "env": "yellow",
    "sampled": "bold cyan",
}


def render_terminal(
    records: list[GroupRecord],
    tokenizer: Any,
    console: Any,
    *,
    source: str = "",
    group: int | None = None,
) -> None:
    """Print the file to a rich console: sampled tokens bold cyan, prompt grey, env yellow."""
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

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
    head.add_row(
        "stop reasons", Text(", ".join(f"{k}: {v}" for k, v in summary["stop_reasons"].items()))
    )
    console.print(Panel(head, title="trajectories", expand=False))
    legend = Text()
    legend.append("prompt", _TERMINAL_STYLES["prompt"])
    legend.append("  ")
    legend.append("environment", _TERMINAL_STYLES["env"])
    legend.append("  ")
    legend.append("sampled (trained on)", _TERMINAL_STYLES["sampled"])
    console.print(legend)

    for index, record in select_groups(records, group):
        view = group_view(tokenizer, record, index)
        title = Text(f"group {view.index}  key {view.key}  task {view.task_id}  ({view.status})")
        if view.status != "ok":
            console.print(
                Panel(Text(view.error or "failed", style="red"), title=title, expand=False)
            )
            continue
        console.rule(title)
        for traj in view.trajectories:
            text = Text()
            for span in traj.spans:
                if span.restart:
                    text.append("\n[new training sample]\n", "bold red")
                for piece in span.pieces:
                    text.append(piece.text, _TERMINAL_STYLES[span.kind])
            heading = Text(f"trajectory {traj.index}", style="bold")
            heading.append(
                f"  reward {traj.total_reward:.4g} (steps {traj.step_reward:.4g} + group "
                f"{traj.group_reward:.4g})  stop {traj.stop_reason}  sampled "
                f"{traj.sampled_tokens} / masked {traj.masked_tokens} tokens"
                + (f"  {traj.samples} training samples" if traj.samples > 1 else "")
            )
            console.print(heading)
            console.print(text)
            table = Table("turn", "action tok", "obs tok", "sampler stop", "reward", "metrics")
            for row in traj.turns:
                metrics = ", ".join(f"{k}={_fmt(v)}" for k, v in row.metrics.items())
                table.add_row(
                    str(row.turn),
                    str(row.action_tokens),
                    str(row.observation_tokens) + (" (restart)" if row.restart else ""),
                    Text(row.sampler_stop),
                    _fmt(row.reward),
                    Text(metrics),
                )
            console.print(table)
        if view.group_metrics and any(view.group_metrics):
            console.print(Text(f"group metrics: {view.group_metrics}"))
