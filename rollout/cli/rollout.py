"""``agentenvs rollout``: collect GROUPS x GROUP_SIZE episodes into a resumable store, and
:func:`run_rollout`, the same run callable from Python (the demo uses it)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentenvs.rollout.cli import tree_options as trees
from agentenvs.rollout.cli.common import (
    EXIT_FAILED_GROUPS,
    CLIError,
    err,
    fail,
    friendly_errors,
    load_tokenizer_or_fail,
    one_line,
    out,
    parse_assignments,
    resolve_tokenizer_spec,
)
from agentenvs.rollout.cli.policy_warnings import collapsed_policy_warnings
from agentenvs.rollout.cli.run_provenance import run_provenance
from agentenvs.rollout.cli.summary import summary_table, throughput

if TYPE_CHECKING:
    from agentenvs.envs.config import EnvConfig
    from agentenvs.rollout.collect.collector import CollectionResult


@dataclass
class RolloutRun:
    env_name: str
    config: EnvConfig
    result: CollectionResult
    summary: dict[str, Any]
    out: Path


def make_policy_or_fail(name: str, options: dict[str, Any]) -> Any:
    from agentenvs.rollout.policies import make_policy

    try:
        return make_policy(name, **options)
    except (ValueError, TypeError, FileNotFoundError) as error:
        raise CLIError(one_line(str(error))) from None


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
    new_run: bool = False,
    tree: trees.BranchSchedule | None = None,
    executor: str = "in-process",
    ray_address: str | None = None,
) -> RolloutRun:
    """What ``agentenvs rollout`` does, callable from Python (the demo uses it); with
    ``tree``, as tree rollouts."""
    from agentenvs.envs.registry import make
    from agentenvs.rollout.collect.collector import collect, summarize
    from agentenvs.rollout.collect.options import OptionError, check_at_least, check_collect_options
    from agentenvs.rollout.collect.store import TrajectoryStore
    from agentenvs.rollout.policies.base import ClosablePolicy

    try:  # the collector's own checks, the options spelled as flags
        check_at_least("groups", groups, 1)
        check_at_least("group_size", group_size, 1)
        check_collect_options(concurrency=concurrency, retries=retries, group_timeout=group_timeout)
    except OptionError as error:
        raise CLIError(error.as_flag()) from None
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
        raise CLIError(one_line(str(error))) from None
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    builders = trees.as_trees(builders, tree)
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
    from agentenvs.rollout.collect.executors.choice import make_executor

    try:
        chosen = make_executor(
            executor, ray_address=ray_address, policy_name=policy_name, policy_options=options
        )
    except (ValueError, ImportError) as error:
        raise CLIError(one_line(str(error))) from None

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
                new_run=new_run,
                executor=chosen,
            )
        finally:
            await chosen.close()
            if isinstance(policy, ClosablePolicy):
                await policy.aclose()

    started = time.monotonic()
    with collapsed_policy_warnings(err):
        result = asyncio.run(go())
    elapsed = time.monotonic() - started
    summary = {
        **summarize(result.records),
        **trees.tree_summary(result.records, tree),
        "skipped": result.skipped,
        "out": str(out_path),
        **throughput(result.records, elapsed),
    }
    return RolloutRun(env_name, config, result, summary, out_path)


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
            metavar="URL", help="SandboxFusion URL with --sandbox sandboxfusion (sandbox.url)."
        ),
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
            new_run=new_run,
            executor=executor,
            ray_address=ray_address,
            tree=tree,
        )
    if json_summary:
        sys.stdout.write(json.dumps(run.summary, sort_keys=True) + "\n")
        sys.stdout.flush()
    else:
        out.print(summary_table(run.summary, f"{env}: {policy} policy"))
    failed = run.result.failed
    if failed:
        first = one_line(failed[0].error or "unknown error")
        raise fail(
            f"{len(failed)} of {len(run.result.records)} groups failed "
            f"(stored as failed; a rerun retries them). First: {first}",
            EXIT_FAILED_GROUPS,
        )
