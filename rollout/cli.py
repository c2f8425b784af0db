"""The ``agentenvs`` command: list environments, collect rollouts, view them, run the demo.

Bad input (an unknown environment, a config key it does not accept, a file that is
not a trajectory store, a policy server that does not answer) ends with one line
on stderr and a non-zero exit, never a traceback: the person typing the command
made a mistake or hit an outage, and the message should say which.

Exit codes: 0 success, 1 the run happened but groups failed, 2 bad input.
Heavy imports happen inside the commands so ``agentenvs --help`` stays instant.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from agentenvs.envs.config import EnvConfig
    from agentenvs.rollout.collector import CollectionResult

# Environments whose modules do not import are reported by ``agentenvs list`` and the
# demo; the registry's import-time warning about them would only repeat that.
logging.getLogger("agentenvs.envs.registry").setLevel(logging.ERROR)

EXIT_FAILED_GROUPS = 1
EXIT_BAD_INPUT = 2

app = typer.Typer(
    name="agentenvs",
    help="Multi-turn agent environments for LLM RL: list, roll out, view, demo.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class CLIError(Exception):
    """A problem the user can fix; printed as one line, exit code 2."""


# ---- parsing key=value options -------------------------------------------------------------


def parse_value(text: str) -> Any:
    """JSON where it parses (numbers, booleans, null, lists, objects), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_assignments(items: Sequence[str], option: str) -> dict[str, Any]:
    """``["limits.max_turns=5", "renderer=chat"]`` -> ``{"limits": {"max_turns": 5}, ...}``."""
    result: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CLIError(f"{option} expects key=value, got {item!r}")
        parts = key.split(".")
        if any(not p for p in parts):
            raise CLIError(f"{option}: bad key {key!r}")
        node = result
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                prefix = ".".join(parts[: depth + 1])
                raise CLIError(f"{option}: {key!r} conflicts with {prefix}={child!r}")
            node = child
        value = parse_value(raw)
        existing = node.get(parts[-1])
        if isinstance(existing, dict) and isinstance(value, dict):
            existing.update(value)
        elif isinstance(existing, dict):
            raise CLIError(f"{option}: {key}={raw!r} conflicts with the nested keys under {key}")
        else:
            node[parts[-1]] = value
    return result


# ---- error handling ---------------------------------------------------------------------------


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    from rich.markup import escape

    err.print(f"[bold red]error:[/bold red] {escape(message)}", markup=True, highlight=False)
    return typer.Exit(code)


@contextmanager
def friendly_errors() -> Iterator[None]:
    """Turn the errors a user can cause into one line and exit code 2."""
    from agentenvs.envs.registry import EnvConfigError, UnknownEnvError
    from agentenvs.rollout.policies.base import PolicyError
    from agentenvs.rollout.viewer import ViewerError

    try:
        yield
    except (CLIError, EnvConfigError, UnknownEnvError, ViewerError, PolicyError) as error:
        raise _fail(str(error)) from None
    except FileNotFoundError as error:
        message = str(error) if error.filename is None else f"{error.filename}: no such file"
        raise _fail(message) from None
    except OSError as error:
        where = f"{error.filename}: " if error.filename else ""
        raise _fail(f"{where}{error.strerror or error}") from None


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# ---- list --------------------------------------------------------------------------------------


@dataclass
class EnvRow:
    name: str
    gym_id: str | None
    entry_point: str
    description: str
    available: bool
    error: str | None = None


def registered_envs() -> list[EnvRow]:
    """Every entry point of the ``agentenvs.envs`` group, loadable or not."""
    from importlib.metadata import entry_points

    from agentenvs.envs.registry import ENTRY_POINT_GROUP, config_class, list_envs

    rows = {
        info.name: EnvRow(info.name, info.gym_id, info.target, info.description, True)
        for info in list_envs()
    }
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in rows:
            continue
        try:
            config_class(point.name)
            problem = "loads now but failed during listing"
        except Exception as error:
            problem = _one_line(f"{type(error).__name__}: {error}")
        rows[point.name] = EnvRow(point.name, None, point.value, "", False, problem)
    return [rows[name] for name in sorted(rows)]


@app.command("list")
def list_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead.")] = False,
) -> None:
    """List registered environments (the agentenvs.envs entry-point group)."""
    rows = registered_envs()
    if as_json:
        sys.stdout.write(json.dumps([row.__dict__ for row in rows]) + "\n")
        return
    table = Table(title="agentenvs environments")
    table.add_column("name", no_wrap=True)
    table.add_column("gym id", no_wrap=True)
    table.add_column("entry point", overflow="fold")
    table.add_column("description", overflow="fold")
    for row in rows:
        if row.available:
            table.add_row(row.name, row.gym_id or "", row.entry_point, row.description)
        else:
            table.add_row(
                f"[dim]{row.name}[/dim]",
                "",
                f"[dim]{row.entry_point}[/dim]",
                f"[red]not loadable:[/red] {row.error}",
            )
    out.print(table)


# ---- rollout ------------------------------------------------------------------------------------


@dataclass
class RolloutRun:
    env_name: str
    config: EnvConfig
    result: CollectionResult
    summary: dict[str, Any]
    out: Path


def resolve_tokenizer_spec(spec: str | None, policy: str, policy_options: dict[str, Any]) -> str:
    """The tokenizer to render with: the one asked for; else a local model's own; else builtin."""
    if spec:
        return spec
    if policy == "hf" and isinstance(policy_options.get("model"), str):
        return str(policy_options["model"])
    return "builtin"


def load_tokenizer_or_fail(spec: str) -> Any:
    from agentenvs.rollout.tokenizer import load_tokenizer

    local = Path(spec).expanduser()
    if spec.startswith(("/", ".", "~")) and not local.exists():
        # Clearly a path: do not let transformers take it for a Hub id and go online.
        raise CLIError(f"cannot load tokenizer {spec!r}: no such directory")
    try:
        return load_tokenizer(spec)
    except Exception as error:  # transformers raises OSError, ValueError, ...
        raise CLIError(f"cannot load tokenizer {spec!r}: {_one_line(str(error))[:300]}") from None


def make_policy_or_fail(name: str, options: dict[str, Any]) -> Any:
    from agentenvs.rollout.policies import make_policy

    try:
        return make_policy(name, **options)
    except (ValueError, TypeError, FileNotFoundError) as error:
        raise CLIError(_one_line(str(error))) from None


def run_provenance(
    *,
    tokenizer: Any,
    tokenizer_spec: str,
    env_name: str,
    config: EnvConfig,
    policy: Any,
    policy_name: str,
    policy_options: dict[str, Any],
) -> dict[str, Any]:
    """What produced the run: tokenizer, template, renderer, env and config, policy."""
    from agentenvs.rollout.collector import policy_provenance
    from agentenvs.rollout.provenance import PolicyIdentity, SamplingSettings, build_provenance

    described = policy_provenance(policy)
    plain_options = {
        k: v for k, v in policy_options.items() if isinstance(v, str | int | float | bool | None)
    }
    record = build_provenance(
        tokenizer=tokenizer,
        env_name=env_name,
        env_config=config,
        policy=PolicyIdentity(
            kind=policy_name,
            model=_str_or_none(described.get("model")),
            url=_str_or_none(described.get("url")),
            weights_version=described.get("weights_version"),
            options={**plain_options, **{k: v for k, v in described.items() if k != "policy"}},
        ),
        sampling=SamplingSettings(
            temperature=described.get("temperature"),
            top_p=described.get("top_p"),
            max_tokens=described.get("max_tokens"),
            seed=described.get("seed"),
        ),
    )
    record["tokenizer"]["spec"] = tokenizer_spec  # how `agentenvs view` reloads it
    return record


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def run_rollout(
    env_name: str,
    *,
    config_overrides: dict[str, Any] | None = None,
    tokenizer_spec: str | None = None,
    policy_name: str = "scripted",
    policy_options: dict[str, Any] | None = None,
    groups: int = 4,
    group_size: int = 2,
    concurrency: int = 8,
    out_path: str | Path,
    retries: int = 1,
    group_timeout: float | None = None,
    split: str = "train",
    progress: bool = True,
    tokenizer: Any = None,
) -> RolloutRun:
    """What ``agentenvs rollout`` does, callable from Python (the demo uses it)."""
    from agentenvs.envs.registry import make
    from agentenvs.rollout.collector import collect, summarize
    from agentenvs.rollout.store import TrajectoryStore

    for name, value, low in (("groups", groups, 1), ("group-size", group_size, 1)):
        if value < low:
            raise CLIError(f"--{name} must be at least {low}, got {value}")
    if concurrency < 1:
        raise CLIError(f"--concurrency must be at least 1, got {concurrency}")
    if retries < 0:
        raise CLIError(f"--retries must be 0 or more, got {retries}")
    if group_timeout is not None and group_timeout <= 0:
        raise CLIError(f"--group-timeout must be positive, got {group_timeout}")
    config = make(env_name, **(config_overrides or {}))
    options = dict(policy_options or {})
    spec = resolve_tokenizer_spec(tokenizer_spec, policy_name, options)
    if tokenizer is None:
        tokenizer = load_tokenizer_or_fail(spec)
    if policy_name in ("hf", "openai", "interactive") and "tokenizer" not in options:
        options["tokenizer"] = tokenizer  # the policy must tokenize as the env renders
    policy = make_policy_or_fail(policy_name, options)
    try:
        dataset = config.dataset(tokenizer, group_size=group_size, n_groups=groups, split=split)
    except ValueError as error:
        raise CLIError(_one_line(str(error))) from None
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    provenance = run_provenance(
        tokenizer=tokenizer,
        tokenizer_spec=spec,
        env_name=env_name,
        config=config,
        policy=policy,
        policy_name=policy_name,
        policy_options=options,
    )
    out_path = Path(out_path)

    async def go() -> CollectionResult:
        try:
            return await collect(
                builders,
                policy,
                concurrency=concurrency,
                retries=retries,
                group_timeout=group_timeout,
                store=TrajectoryStore(out_path),
                env_name=env_name,
                env_config=config.model_dump(mode="json"),
                provenance=provenance,
                progress=progress,
            )
        finally:
            close = getattr(policy, "aclose", None)
            if callable(close):
                await close()

    result = asyncio.run(go())
    summary = {**summarize(result.records), "skipped": result.skipped, "out": str(out_path)}
    return RolloutRun(env_name, config, result, summary, out_path)


def summary_table(summary: dict[str, Any], title: str = "rollout summary") -> Table:
    table = Table(title=title, show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    for key in ("groups", "ok", "failed", "skipped", "trajectories", "mean_reward"):
        if key in summary:
            value = summary[key]
            table.add_row(
                key.replace("_", " "), f"{value:.4f}" if isinstance(value, float) else str(value)
            )
    for key in ("mean_turns", "tokens_sampled", "retried_groups"):
        if key in summary:
            value = summary[key]
            table.add_row(
                key.replace("_", " "), f"{value:.2f}" if isinstance(value, float) else str(value)
            )
    stops = summary.get("stop_reasons") or {}
    table.add_row("stop reasons", ", ".join(f"{k}: {v}" for k, v in stops.items()) or "-")
    if "out" in summary:
        table.add_row("written to", str(summary["out"]))
    return table


@app.command("rollout")
def rollout_command(
    env: Annotated[str, typer.Argument(help="Registered environment name (see `agentenvs list`).")],
    policy: Annotated[
        str, typer.Option(help="scripted, replay, interactive, hf or openai.")
    ] = "scripted",
    groups: Annotated[int, typer.Option(help="How many groups (tasks) to run.")] = 8,
    group_size: Annotated[int, typer.Option(help="Episodes per group (GRPO's G).")] = 4,
    concurrency: Annotated[int, typer.Option(help="Groups in flight at once.")] = 8,
    out_file: Annotated[
        Path | None,
        typer.Option("--out", help="Trajectory JSONL; reruns resume. Default out/<env>.jsonl."),
    ] = None,
    sets: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="Env config key=value (JSON values; dotted keys nest).",
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="builtin or a local Hugging Face tokenizer directory."),
    ] = None,
    renderer: Annotated[
        str | None, typer.Option(help="continuation or chat (default: the env's own).")
    ] = None,
    retries: Annotated[int, typer.Option(help="Extra attempts per group, with fresh envs.")] = 1,
    group_timeout: Annotated[
        float | None, typer.Option(help="Seconds before a group attempt is abandoned.")
    ] = None,
    policy_opts: Annotated[
        list[str] | None,
        typer.Option(
            "--policy-opt", metavar="KEY=VALUE", help="Policy option key=value, e.g. url=http://..."
        ),
    ] = None,
    split: Annotated[str, typer.Option(help="Dataset split.")] = "train",
    json_summary: Annotated[
        bool, typer.Option("--json-summary", help="Print one JSON line instead of the table.")
    ] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    sandbox: Annotated[
        str | None,
        typer.Option(
            help="Sandbox backend for envs that run code (local, docker, sandboxfusion); "
            "short for --set sandbox.backend=..."
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(help="SandboxFusion URL with --sandbox sandboxfusion (sandbox.url)."),
    ] = None,
) -> None:
    """Run GROUPS groups of GROUP_SIZE episodes of ENV with a policy; store them as JSONL."""
    with friendly_errors():
        sandbox_sets = [f"sandbox.backend={sandbox}"] if sandbox else []
        if url:
            sandbox_sets.append(f"sandbox.url={url}")
        overrides = parse_assignments([*(sets or []), *sandbox_sets], "--set")
        if renderer is not None:
            overrides["renderer"] = renderer
        options = parse_assignments(policy_opts or [], "--policy-opt")
        run = run_rollout(
            env,
            config_overrides=overrides,
            tokenizer_spec=tokenizer,
            policy_name=policy,
            policy_options=options,
            groups=groups,
            group_size=group_size,
            concurrency=concurrency,
            out_path=out_file or Path("out") / f"{env}.jsonl",
            retries=retries,
            group_timeout=group_timeout,
            split=split,
            progress=not no_progress and not json_summary,
        )
    if json_summary:
        sys.stdout.write(json.dumps(run.summary, sort_keys=True) + "\n")
        sys.stdout.flush()
    else:
        out.print(summary_table(run.summary, f"{env}: {policy} policy"))
    failed = run.result.failed
    if failed:
        first = _one_line(failed[0].error or "unknown error")
        raise _fail(
            f"{len(failed)} of {len(run.result.records)} groups failed "
            f"(stored as failed; a rerun retries them). First: {first}",
            EXIT_FAILED_GROUPS,
        )


# ---- view ---------------------------------------------------------------------------------------


def load_view_tokenizer(records: list, requested: str | None) -> tuple[Any, str]:
    from agentenvs.rollout.viewer import tokenizer_spec_for

    spec, fingerprint = tokenizer_spec_for(records, requested)
    try:
        tokenizer = load_tokenizer_or_fail(spec)
    except CLIError:
        if requested:
            raise
        raise CLIError(
            f"the file names tokenizer {spec!r}, which cannot be loaded here; "
            "pass --tokenizer builtin or a local tokenizer directory"
        ) from None
    expected = (fingerprint or {}).get("vocab_sha256")
    if expected:
        from agentenvs.rollout.provenance import tokenizer_fingerprint

        actual = tokenizer_fingerprint(tokenizer).get("vocab_sha256")
        if actual != expected:
            err.print(
                f"warning: the file was made with a different tokenizer (vocab {expected}, "
                f"{spec!r} has {actual}); decoded text may be wrong",
                markup=False,
            )
    return tokenizer, spec


@app.command("view")
def view_command(
    file: Annotated[Path, typer.Argument(help="Trajectory JSONL written by `agentenvs rollout`.")],
    html_out: Annotated[
        Path | None, typer.Option("--html", help="Write a self-contained HTML page here.")
    ] = None,
    group: Annotated[int | None, typer.Option(help="Show only this group (0-based).")] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="Tokenizer to decode with (default: the file's, else builtin)."),
    ] = None,
) -> None:
    """Show trajectories: sampled tokens vs masked prompt/environment tokens, rewards, metrics."""
    from agentenvs.rollout.viewer import (
        load_records,
        render_html,
        render_terminal,
        select_groups,
    )

    with friendly_errors():
        records = load_records(file)
        select_groups(records, group)  # validates --group before loading a tokenizer
        tok, spec = load_view_tokenizer(records, tokenizer)
        if html_out is not None:
            page = render_html(records, tok, source=str(file), group=group, tokenizer_name=spec)
            if html_out.parent != Path():
                html_out.parent.mkdir(parents=True, exist_ok=True)
            html_out.write_text(page, encoding="utf-8")
            shown = 1 if group is not None else len(records)
            out.print(f"wrote {html_out} ({shown} group(s), {len(page) // 1024} KiB)")
        else:
            render_terminal(records, tok, out, source=str(file), group=group)


# ---- check ----------------------------------------------------------------------------------------

_STATUS_STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}


@app.command("check")
def check_command(
    file: Annotated[Path, typer.Argument(help="A trajectory store or a JSONL samples hand-off.")],
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="Tokenizer for the decode and re-rendering checks (default: the file's)."
        ),
    ] = None,
    current_version: Annotated[
        int | None, typer.Option(help="The policy's current weights version, to judge staleness.")
    ] = None,
    max_staleness: Annotated[
        int | None, typer.Option(help="Fail when a group is more versions behind than this.")
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="One JSON object instead of a table.")
    ] = False,
) -> None:
    """Check that a run's data lines up before training on it; exit 1 on any failure."""
    from agentenvs.rollout.check import check_file, file_kind

    with friendly_errors():
        if not file.is_file():
            raise CLIError(f"cannot read {file}: no such file")
        tok = None
        try:
            kind = file_kind(file)
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise CLIError(_one_line(str(error))) from None
        if kind == "trajectories":
            from agentenvs.rollout.viewer import load_records

            tok, _ = load_view_tokenizer(load_records(file), tokenizer)
        try:
            report = check_file(
                file, tokenizer=tok, current_version=current_version, max_staleness=max_staleness
            )
        except (ValueError, KeyError) as error:
            raise CLIError(f"{file}: {_one_line(str(error))}") from None
    if json_output:
        payload = {
            "source": report.source,
            "kind": report.kind,
            "ok": report.ok,
            "stats": report.stats,
            "findings": [vars(f) for f in report.findings],
        }
        sys.stdout.write(json.dumps(payload, sort_keys=True) + "\n")
    else:
        table = Table(title=f"agentenvs check: {file} ({report.kind})")
        for column in ("check", "status", "detail", "first offender"):
            table.add_column(column, overflow="fold")
        for finding in report.findings:
            style = _STATUS_STYLE[finding.status]
            table.add_row(
                finding.check, f"[{style}]{finding.status}[/]", finding.detail, finding.where
            )
        out.print(table)
        out.print(
            ("[green]all checks passed[/]" if report.ok else "[bold red]checks failed[/]")
            + f"  {report.stats}"
        )
    if not report.ok:
        raise typer.Exit(EXIT_FAILED_GROUPS)


@app.command("check-template")
def check_template_command(
    tokenizer: Annotated[
        str, typer.Argument(help="A local Hugging Face tokenizer directory, or 'builtin'.")
    ],
    strict: Annotated[
        bool, typer.Option(help="Exit 1 when the template does not extend every turn.")
    ] = False,
) -> None:
    """Does the chat template extend each turn? Where not, the collector splits samples."""
    from agentenvs.rollout.template_check import check_template

    with friendly_errors():
        tok = load_tokenizer_or_fail(tokenizer)
        try:
            report = check_template(tok, tokenizer)
        except Exception as error:  # a template that cannot render these conversations
            raise CLIError(
                f"template of {tokenizer!r} failed to render: {_one_line(str(error))}"
            ) from None
    table = Table(title=f"chat template of {report.tokenizer}")
    for column in ("conversation", "turn", "extends", "collector does", "detail"):
        table.add_column(column, overflow="fold")
    for conv in report.conversations:
        for turn in conv.turns:
            mark = "[green]yes[/]" if turn.extends else "[bold red]no[/]"
            table.add_row(conv.name, str(turn.turn), mark, turn.collector_action, turn.detail)
    out.print(table)
    verdict = (
        "extends every turn: one training sample per trajectory"
        if report.extends
        else "rewrites history: the collector starts a new sample at each break (counted in "
        "metric renderer/prefix_breaks)"
    )
    out.print(verdict)
    if strict and not report.extends:
        raise typer.Exit(EXIT_FAILED_GROUPS)


# ---- demo ---------------------------------------------------------------------------------------


@app.command("demo")
def demo_command(
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where files go.")] = Path("out"),
    envs: Annotated[
        list[str] | None, typer.Option("--env", help="Only these environments.")
    ] = None,
) -> None:
    """Scripted rollouts of every environment that can run here; summaries and HTML views."""
    from agentenvs.rollout.demo import run_demo

    with friendly_errors():
        ok = run_demo(out_dir, only=envs or None, console=out)
    if not ok:
        raise typer.Exit(EXIT_FAILED_GROUPS)


# ---- optional sub-apps ---------------------------------------------------------------------------

SUBAPPS = {
    "sandbox": "agentenvs.sandbox.cli",
    "retriever": "agentenvs.envs.search_r1.cli",
}


def mount_subapps(main_app: typer.Typer) -> list[str]:
    """Mount other parts' command groups when their modules import (skipped when absent)."""
    import importlib

    mounted = []
    for name, module_name in SUBAPPS.items():
        try:
            module = importlib.import_module(module_name)
        except Exception:
            continue
        sub = getattr(module, "app", None)
        if isinstance(sub, typer.Typer):
            main_app.add_typer(sub, name=name)
            mounted.append(name)
    return mounted


mount_subapps(app)


def main() -> None:
    """The ``agentenvs`` console script."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app()


if __name__ == "__main__":
    main()
