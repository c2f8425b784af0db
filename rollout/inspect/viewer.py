"""Look at stored trajectories: the shared views behind the HTML page and the terminal.

Both views show the token stream exactly as the policy saw it, decoded piece by
piece (:mod:`agentenvs.rollout.inspect.decode`), so sampled tokens (the ones
that carry loss) stand apart from prompt and environment tokens (masked out).
This module turns records into views; :mod:`page_data` and the template make
the page, :mod:`terminal_view` prints to a console.

Reading goes through the store's one reader: torn lines (a killed run) are
skipped with a warning, anything else that is not a record is an error naming
the line. Each group is shown at its latest outcome, so a failure that a rerun
fixed is not counted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.types import Trajectory
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.inspect.decode import DecodedSpan, Piece, decode_pieces, decode_span
from agentenvs.rollout.weights.token_versions import runs_of

__all__ = [
    "EndOfTurn",
    "GroupView",
    "Piece",
    "TrajectoryView",
    "ViewerError",
    "decode_pieces",
    "end_of_turn",
    "group_view",
    "load_records",
    "overview",
    "render_html",
    "select_groups",
    "tokenizer_spec_for",
    "trajectory_view",
]

SpanKind = Literal["prompt", "env", "sampled"]
TEMPLATE_NAME = "viewer.html.j2"
SCRIPT_NAME = "viewer.js"


class ViewerError(AgentEnvsError, RuntimeError):
    """The file cannot be shown; the message says why in one line."""


# ---- reading ---------------------------------------------------------------------------


def load_records(path: str | Path) -> list[GroupRecord]:
    """The latest outcome of every group of a trajectory file, in file order."""
    from agentenvs.rollout.collect.store import read_store

    return read_store(path).latest()


# ---- turning records into views ----------------------------------------------------------


@dataclass
class Span:
    kind: SpanKind
    decoded: DecodedSpan
    turn: int | None = None
    restart: bool = False
    """The context was rebuilt here: the template could not extend the conversation."""
    images: list[tuple[int, int, str]] = field(default_factory=list)
    """Images the span shows: (first token in the span, placeholder count, pixel hash)."""
    versions: list[list[Any]] = field(default_factory=list)
    """A sampled span a weight sync cut: its version runs ``[tokens, version, proof]``
    in order (:mod:`agentenvs.rollout.weights.token_versions`); empty for one version."""

    @property
    def pieces(self) -> list[Piece]:
        """One object per piece, made on demand: the page needs only the offsets."""
        return self.decoded.pieces()


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
    traceback: str | None = None
    """A failed group's last error as Python printed it (file, line, frames)."""

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
            start = n if extends else 0
            shown = [(p.offset - start, p.tokens, p.image.sha256) for p in tr.images
                     if p.offset >= start]  # fmt: skip
            spans.append(Span(kind, decode_span(tokenizer, new), turn, restart, shown))
        action = tr.ac.tokens
        logprobs = tr.ac.logprobs if tr.ac.logprobs is not None else [None] * len(action)
        if len(logprobs) != len(action):  # a broken record: show tokens, drop logprobs
            logprobs = [None] * len(action)
        spans.append(
            Span("sampled", decode_span(tokenizer, action, logprobs), turn, versions=_runs(tr))
        )
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
            spans.append(Span("env", decode_span(tokenizer, tail), None, not extends))
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
        traceback=record.traceback,
    )


def select_groups(
    records: list[GroupRecord], group: int | str | None, limit: int | None = None
) -> list[tuple[int, GroupRecord]]:
    """The records to show with their index: all, one group (by 0-based index or by
    key), or the first ``limit``."""
    if limit is not None and limit < 1:
        raise ViewerError(f"--limit must be at least 1, got {limit}")
    if group is None:
        chosen = list(enumerate(records))
        return chosen if limit is None else chosen[:limit]
    for index, record in enumerate(records):
        if record.key == str(group):
            return [(index, record)]
    text = str(group)
    if text.lstrip("-").isdigit():
        number = int(text)
        if 0 <= number < len(records):
            return [(number, records[number])]
    raise ViewerError(
        f"no group {group}: the file holds {len(records)} group(s); pass a 0-based index "
        "or a group key"
    )


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
        "estimators": estimators(records),
        **_tool_calls(records),
    }


def _tool_calls(records: list[GroupRecord]) -> dict[str, str]:
    """``tool_calls``: per tool environment, calls per episode and failures by status
    (absent for a file without tool environments)."""
    from agentenvs.rollout.inspect.tool_checks import describe_summary, tool_summary

    summary = tool_summary(records)
    return {"tool_calls": describe_summary(summary)} if summary else {}


def estimators(records: list[GroupRecord]) -> list[str]:
    """How the stored advantages were computed, as short names (``grpo``, ``rloo, std``)."""
    names = set()
    for record in records:
        info = record.extra.get("advantage_estimator")
        if isinstance(info, dict) and info.get("estimator"):
            names.add(str(info["estimator"]) + (", std" if info.get("normalize_std") else ""))
    return sorted(names)


@dataclass
class EndOfTurn:
    """How the file's actions end: with the end-of-turn token sampled, or not.

    The loss covers exactly the sampled tokens. When the sampler stops before the
    end-of-turn token (a stop string, a policy that returns text), the template
    writes that token at the start of the next observation: it is shown there,
    masked, and is never trained. When the policy sampled it, it ends the action
    and is trained with it. The legend says which, counted over the file."""

    token: str | None
    sampled: int
    turns: int

    def note(self) -> str:
        if not self.token or not self.turns:
            return ""
        if self.sampled == 0:
            return (
                f"end-of-turn token {self.token}: never sampled here, so it is never trained "
                "(the template adds it to the next observation, masked)"
            )
        if self.sampled == self.turns:
            return f"end-of-turn token {self.token}: sampled at the end of every action, so trained"
        return (
            f"end-of-turn token {self.token}: sampled (trained) in {self.sampled} of "
            f"{self.turns} turns; in the others the template adds it to the next "
            "observation (masked, never trained)"
        )


def end_of_turn(records: list[GroupRecord], tokenizer: Any) -> EndOfTurn:
    """Count the turns whose action ends with the tokenizer's end-of-turn (EOS) token."""
    token = getattr(tokenizer, "eos_token", None)  # tokenizers without one give no note
    token_id = getattr(tokenizer, "eos_token_id", None)
    sampled = turns = 0
    for record in records:
        if record.group is None:
            continue
        for traj in record.group.trajectories:
            for tr in traj.transitions:
                turns += 1
                sampled += bool(tr.ac.tokens) and tr.ac.tokens[-1] == token_id
    return EndOfTurn(token if isinstance(token, str) else None, sampled, turns)


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


# ---- HTML --------------------------------------------------------------------------------------


def render_html(
    records: list[GroupRecord],
    tokenizer: Any,
    *,
    source: str = "",
    group: int | str | None = None,
    limit: int | None = None,
    tokenizer_name: str = "",
) -> str:
    """A self-contained page (inline CSS, script and data; no external assets).

    The groups travel as JSON and the page draws each one when it is opened, so
    the page stays small and opens fast however many groups the file holds."""
    from importlib.resources import files

    import jinja2
    from markupsafe import Markup

    from agentenvs.rollout.inspect.page_data import embed_json, page_data

    selected = select_groups(records, group, limit)
    data = page_data(
        records, tokenizer, source=source, tokenizer_name=tokenizer_name, selected=selected
    )
    package = files(__package__)
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    template = env.from_string(package.joinpath(TEMPLATE_NAME).read_text(encoding="utf-8"))
    script = package.joinpath(SCRIPT_NAME).read_text(encoding="utf-8")
    return template.render(
        source=source,
        data=Markup(embed_json(data)),
        script=Markup(script.replace("</", "<\\/")),
    )


def _runs(transition: Any) -> list[list[Any]]:
    """The version runs of an action that spans several versions, as the page shows them."""
    try:
        runs = runs_of(transition)
    except ValueError:  # a malformed entry: `agentenvs check` names it
        return []
    return [run.to_json() for run in runs] if len(runs) > 1 else []
