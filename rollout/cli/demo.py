"""``agentenvs demo`` (what ``make demo`` runs): scripted rollouts of every environment
that can run on this machine, with summaries and HTML views.

It runs on embedded defaults with the built-in tokenizer and each environment's
own scripted oracle, so it needs no model, no download and no service. An
environment whose module does not import, or that cannot run here (a missing
system package, say), is reported in the table and skipped; the demo fails only
if the reference environment, ``guess_number``, fails, because then the shared
machinery itself is broken.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agentenvs.rollout.cli.common import EXIT_FAILED_GROUPS, friendly_errors, out

REFERENCE_ENV = "guess_number"
FLAGSHIPS = ("search_r1", "retool", "alfworld")


@dataclass
class DemoOutcome:
    env: str
    status: str
    """ok, failed (some groups failed), error (could not run), unavailable (does not import)."""
    summary: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    seconds: float = 0.0
    jsonl: Path | None = None
    html: Path | None = None


def demo_order(names: list[str]) -> list[str]:
    """The reference env first, then the flagships, then any other registered env."""
    first = [n for n in (REFERENCE_ENV, *FLAGSHIPS) if n in names]
    return first + sorted(n for n in names if n not in first)


def needs_external_server(env_name: str) -> bool:
    """Whether the env declares that its episodes need a server started apart from the
    demo (``needs_external_server`` on its config class: openenv, mcp_tools)."""
    from agentenvs.envs.registry import config_class

    return config_class(env_name).needs_external_server


def default_demo_envs(rows: dict[str, Any]) -> list[str]:
    """What ``agentenvs demo`` runs without ``--env``: every registered env but those
    that declare they need an external server (an unloadable one is still listed, so
    the table says why it did not run)."""
    return [n for n, row in rows.items() if not (row.available and needs_external_server(n))]


def demo_overrides(env_name: str) -> dict[str, Any]:
    """Settings an environment asks for in demos (``EnvConfig.demo_overrides``)."""
    from agentenvs.envs.registry import config_class

    return dict(config_class(env_name).demo_overrides())


def run_one(
    env_name: str,
    out_dir: Path,
    tokenizer: Any,
    *,
    groups: int,
    group_size: int,
    group_timeout: float,
) -> DemoOutcome:
    from agentenvs.envs.registry import config_class as config_class_of
    from agentenvs.rollout.cli.rollout_run import run_rollout
    from agentenvs.rollout.collect.spec import (
        CollectOptions,
        DatasetSpec,
        EnvSpec,
        RunSpec,
        StoreSpec,
    )
    from agentenvs.rollout.inspect.viewer import load_records, render_html
    from agentenvs.rollout.tokenizer import load_tokenizer

    tokenizer_spec = config_class_of(env_name).demo_tokenizer  # an image env needs image tokens
    jsonl = out_dir / f"demo-{env_name}.jsonl"
    html = out_dir / f"demo-{env_name}.html"
    jsonl.unlink(missing_ok=True)  # a demo shows a fresh run, it does not resume one
    started = time.monotonic()
    try:
        if tokenizer_spec != "builtin":
            tokenizer = load_tokenizer(tokenizer_spec)
        spec = RunSpec(
            EnvSpec(env_name, demo_overrides(env_name)),
            DatasetSpec(groups=groups, group_size=group_size),
            tokenizer=tokenizer_spec,
            limits=CollectOptions(concurrency=4, retries=0, group_timeout=group_timeout),
            store=StoreSpec(jsonl),
        )
        run = run_rollout(spec, tokenizer=tokenizer)
    except Exception as error:
        return DemoOutcome(
            env_name,
            "error",
            message=" ".join(f"{type(error).__name__}: {error}".split())[:300],
            seconds=time.monotonic() - started,
        )
    records = load_records(jsonl)
    html.write_text(
        render_html(records, tokenizer, source=str(jsonl), tokenizer_name=tokenizer_spec),
        encoding="utf-8",
    )
    failed = run.result.failed
    return DemoOutcome(
        env_name,
        "failed" if failed else "ok",
        summary=run.summary,
        message=" ".join((failed[0].error or "").split())[:300] if failed else "",
        seconds=time.monotonic() - started,
        jsonl=jsonl,
        html=html,
    )


def run_demo(
    out_dir: str | Path = "out",
    *,
    only: list[str] | None = None,
    console: Console | None = None,
    groups: int = 4,
    group_size: int = 2,
    group_timeout: float = 60.0,
) -> bool:
    """Run the demo; True when every requested env (by default: the reference env) ran."""
    from agentenvs.rollout.cli.common import CLIError, load_tokenizer_or_fail
    from agentenvs.rollout.cli.listing import registered_envs

    console = console or Console()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = {row.name: row for row in registered_envs()}
    if only:
        unknown = [n for n in only if n not in rows]
        if unknown:
            raise CLIError(
                f"unknown environment(s) {', '.join(unknown)}; registered: {', '.join(sorted(rows))}"
            )
    names = demo_order(list(only or default_demo_envs(rows)))
    console.print(f"agentenvs demo: scripted rollouts of {', '.join(names)} into {out_dir}/")
    left_out = sorted(set(rows) - set(names)) if not only else []
    if left_out:
        console.print(
            Text(
                f"not run: {', '.join(left_out)} (they play against a server you start; "
                "`agentenvs demo --env NAME` runs one once it is up)"
            )
        )
    tokenizer = load_tokenizer_or_fail("builtin")

    outcomes: list[DemoOutcome] = []
    for name in names:
        row = rows[name]
        if not row.available:
            outcomes.append(DemoOutcome(name, "unavailable", message=row.error or ""))
            continue
        console.print(Text(f"running {name} ..."))
        outcomes.append(
            run_one(
                name,
                out_dir,
                tokenizer,
                groups=groups,
                group_size=group_size,
                group_timeout=group_timeout,
            )
        )
    console.print(outcome_table(outcomes))
    for outcome in outcomes:
        if outcome.message and outcome.status != "ok":
            console.print(Text(f"{outcome.env} ({outcome.status}): {outcome.message}", style="red"))
    shown = [o for o in outcomes if o.html is not None]
    if shown:
        console.print("\nLook at the trajectories:")
        for o in shown:
            console.print(Text(f"  {o.html}    (or: agentenvs view {o.jsonl})"))
    required = set(only) if only else {REFERENCE_ENV}
    return all(o.status == "ok" for o in outcomes if o.env in required)


def outcome_table(outcomes: list[DemoOutcome]) -> Table:
    """One row per environment. Nothing is split mid-word at 80 columns: numbers and
    names never wrap, and stop reasons go one per line (``completed: 8``)."""
    from rich import box

    stop_lines = [
        [f"{k}: {v}" for k, v in (o.summary.get("stop_reasons") or {}).items()] for o in outcomes
    ]
    widest_stop = max((len(line) for lines in stop_lines for line in lines), default=1)
    table = Table(title="agentenvs demo", box=box.SIMPLE_HEAD, padding=(0, 0))
    for name in ("env", "status"):
        table.add_column(name, no_wrap=True)
    for name in ("ok", "failed", "episodes", "reward"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("stop reasons", no_wrap=True, min_width=widest_stop)
    table.add_column("time", justify="right", no_wrap=True)
    styles = {"ok": "green", "failed": "red", "error": "red", "unavailable": "yellow"}
    for o, stops in zip(outcomes, stop_lines, strict=True):
        s = o.summary
        table.add_row(
            o.env,
            Text(o.status, style=styles.get(o.status, "")),
            str(s.get("ok", "-")),
            str(s.get("failed", "-")),
            str(s.get("trajectories", "-")),
            "-" if s.get("mean_reward") is None else f"{s['mean_reward']:.3f}",
            Text("\n".join(stops) or "-"),
            f"{o.seconds:.1f}s" if o.seconds else "-",
        )
    return table


def demo_command(
    out_dir: Annotated[
        Path, typer.Option("--out-dir", metavar="DIR", help="Where files go.")
    ] = Path("out"),
    envs: Annotated[
        list[str] | None, typer.Option("--env", metavar="NAME", help="Only these environments.")
    ] = None,
) -> None:
    """Scripted rollouts of every environment that can run here; summaries and HTML views."""
    with friendly_errors():
        ok = run_demo(out_dir, only=envs or None, console=out)
    if not ok:
        raise typer.Exit(EXIT_FAILED_GROUPS)
