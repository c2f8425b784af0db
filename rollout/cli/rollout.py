"""``agentenvs rollout``: collect GROUPS x GROUP_SIZE episodes into a resumable store (the
flags; the run itself is :func:`agentenvs.rollout.cli.rollout_run.run_rollout`)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from agentenvs.rollout.cli import preflight, run_report
from agentenvs.rollout.cli import tree_options as trees
from agentenvs.rollout.cli.common import (
    EXIT_FAILED_GROUPS,
    CLIError,
    err,
    fail,
    friendly_errors,
    out,
    parse_assignments,
)
from agentenvs.rollout.cli.rollout_run import RolloutRun, run_rollout
from agentenvs.rollout.cli.summary import summary_table


@trees.with_tree_options
def rollout_command(
    env: Annotated[
        str,
        typer.Argument(metavar="ENV", help="Registered environment name (see `agentenvs list`)."),
    ],
    policy: Annotated[
        str, typer.Option(metavar="NAME", help="scripted, replay, interactive, hf or openai.")
    ] = "scripted",
    groups: Annotated[int, typer.Option(metavar="N", help="How many groups (tasks) to run.")] = 8,
    group_size: Annotated[
        int, typer.Option(metavar="G", help="Episodes per group (GRPO's G).")
    ] = 4,
    concurrency: Annotated[int, typer.Option(metavar="C", help="Groups in flight at once.")] = 8,
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="FILE",
            help="Trajectory JSONL; reruns resume. Default out/<env>.jsonl.",
        ),
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
        typer.Option(
            metavar="builtin|DIR", help="builtin or a local Hugging Face tokenizer directory."
        ),
    ] = None,
    renderer: Annotated[
        str | None,
        typer.Option(
            metavar="chat|continuation", help="continuation or chat (default: the env's own)."
        ),
    ] = None,
    retries: Annotated[
        int, typer.Option(metavar="R", help="Extra attempts per group, with fresh envs.")
    ] = 1,
    group_timeout: Annotated[
        float | None,
        typer.Option(metavar="SECONDS", help="Seconds before a group attempt is abandoned."),
    ] = None,
    policy_opts: Annotated[
        list[str] | None,
        typer.Option(
            "--policy-opt", metavar="KEY=VALUE", help="Policy option key=value, e.g. url=http://..."
        ),
    ] = None,
    split: Annotated[
        str, typer.Option(metavar="SPLIT", help="Dataset split (train or test; ReTool also eval).")
    ] = "train",
    json_summary: Annotated[
        bool, typer.Option("--json-summary", help="Print one JSON line instead of the table.")
    ] = False,
    new_run: Annotated[
        bool,
        typer.Option(
            "--new-run",
            help="Append a new run to an --out file made by a different run (otherwise refused).",
        ),
    ] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    executor: Annotated[
        str,
        typer.Option(
            metavar="in-process|ray",
            help="Where episodes run: this process, or Ray actors (docs/scale.md).",
        ),
    ] = "in-process",
    ray_address: Annotated[
        str | None,
        typer.Option(
            metavar="auto|HOST:PORT",
            help="Ray cluster to join with --executor ray (default: a local Ray for the run).",
        ),
    ] = None,
    tree: trees.BranchSchedule | None = None,
    sandbox: Annotated[
        str | None,
        typer.Option(
            metavar="BACKEND",
            help="Sandbox backend for envs that run code (local, docker, sandboxfusion); "
            "short for --set sandbox.backend=...",
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="The policy server's URL with --policy openai (--policy-opt url=...); "
            "SandboxFusion's with --sandbox sandboxfusion (sandbox.url).",
        ),
    ] = None,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help="Print tracebacks: of the first failed group, and of any error."
        ),
    ] = False,
    env_server: Annotated[
        list[str] | None,
        typer.Option(
            "--env-server",
            metavar="URL",
            help="Run the env on `agentenvs serve` servers (repeat or comma-separate to "
            "balance groups over several; docs/env-servers.md).",
        ),
    ] = None,
    env_server_token: Annotated[
        str | None,
        typer.Option(
            metavar="TOKEN", help="Bearer token of the env servers ($AGENTENVS_ENV_SERVER_TOKEN)."
        ),
    ] = None,
) -> None:
    """Run GROUPS groups of GROUP_SIZE episodes of ENV with a policy; store them as JSONL."""
    out_path = out_file or Path("out") / f"{env}.jsonl"
    with friendly_errors(debug=debug):
        sandbox_sets = [f"sandbox.backend={sandbox}"] if sandbox else []
        url_sets, policy_url = preflight.route_url(url, policy=policy, sandbox=sandbox)
        overrides = parse_assignments([*(sets or []), *sandbox_sets, *url_sets], "--set")
        if renderer is not None:
            overrides["renderer"] = renderer
        options = parse_assignments(policy_opts or [], "--policy-opt")
        if policy_url is not None:
            if "url" in options:
                raise CLIError("--url and --policy-opt url=... both name the policy server")
            options["url"] = policy_url
        run = _interruptible(
            out_path,
            env,
            config_overrides=overrides,
            tokenizer_spec=tokenizer,
            policy_name=policy,
            policy_options=options,
            groups=groups,
            group_size=group_size,
            concurrency=concurrency,
            retries=retries,
            group_timeout=group_timeout,
            split=split,
            progress=not no_progress and not json_summary,
            new_run=new_run,
            executor=executor,
            ray_address=ray_address,
            tree=tree,
            env_servers=env_server,
            env_server_token=env_server_token or os.environ.get("AGENTENVS_ENV_SERVER_TOKEN"),
        )
    if json_summary:
        sys.stdout.write(json.dumps(run.summary, sort_keys=True) + "\n")
        sys.stdout.flush()
    else:
        out.print(summary_table(run.summary, f"{env}: {policy} policy"))
    failed = run.result.failed
    if failed:
        if debug:
            run_report.print_traceback(err, failed[0])
        message = run_report.failed_groups_message(
            run.result.records, len(run.result.records), debug=debug
        )
        raise fail(message, EXIT_FAILED_GROUPS)


EXIT_INTERRUPTED = 130
"""What a shell reports for a command ended by Ctrl-C (128 + SIGINT)."""


def _interruptible(out_path: Path, env_name: str, **arguments: Any) -> RolloutRun:
    """:func:`run_rollout`; Ctrl-C ends it with what was stored and how to resume."""
    try:
        return run_rollout(env_name, out_path=out_path, **arguments)
    except KeyboardInterrupt:
        from agentenvs.rollout.collect.store import TrajectoryStore
        from agentenvs.rollout.collect.store_commit import wait_for_writers

        wait_for_writers()  # groups handed to the writer before Ctrl-C still land
        stored = len(TrajectoryStore(out_path).keys()) if out_path.exists() else 0
        err.print(run_report.interrupted_message(stored, out_path), markup=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
