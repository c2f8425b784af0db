"""``agentenvs eval ENV --policy ... --split test``: an evaluation run ``compare`` accepts.

It is ``agentenvs rollout`` with what an evaluation must hold still held still
(:mod:`agentenvs.rollout.compare.eval_plan`): a fixed panel of the split's first
tasks, the budget of the config (or of ``--preset``), greedy sampling by default,
one trajectory per task unless asked, and no training-only knobs (no tree
rollouts, no ``--new-run`` into another run's file). Rerunning the same command
resumes; the same command with other settings into the same file is refused.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from agentenvs.rollout.cli import run_report
from agentenvs.rollout.cli.common import (
    EXIT_FAILED_GROUPS,
    err,
    fail,
    friendly_errors,
    out,
    parse_assignments,
)
from agentenvs.rollout.cli.summary import summary_table


def eval_command(
    env: Annotated[
        str,
        typer.Argument(metavar="ENV", help="Registered environment name (see `agentenvs list`)."),
    ],
    policy: Annotated[
        str, typer.Option(metavar="NAME", help="scripted, replay, hf or openai.")
    ] = "scripted",
    split: Annotated[str, typer.Option(metavar="SPLIT", help="The split to evaluate on.")] = "test",
    preset: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="A preset whose config and budget to evaluate with."),
    ] = None,
    tasks: Annotated[
        int | None,
        typer.Option(metavar="N", help="The panel: the split's first N tasks (default: all)."),
    ] = None,
    group_size: Annotated[
        int, typer.Option(metavar="G", help="Trajectories per task (1 for greedy sampling).")
    ] = 1,
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="FILE",
            help="Trajectory JSONL; reruns resume. Default out/<env>-eval-<split>.jsonl.",
        ),
    ] = None,
    sets: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE", help="Env config key=value (dotted keys nest)."),
    ] = None,
    policy_opts: Annotated[
        list[str] | None,
        typer.Option(
            "--policy-opt",
            metavar="KEY=VALUE",
            help="Policy option, e.g. model=DIR or url=...; temperature=1 undoes greedy.",
        ),
    ] = None,
    tokenizer: Annotated[
        str | None, typer.Option(metavar="builtin|DIR", help="builtin or a tokenizer directory.")
    ] = None,
    concurrency: Annotated[int, typer.Option(metavar="C", help="Groups in flight at once.")] = 8,
    retries: Annotated[
        int, typer.Option(metavar="R", help="Extra attempts per group, with fresh envs.")
    ] = 1,
    group_timeout: Annotated[
        float | None,
        typer.Option(metavar="SECONDS", help="Seconds before a group attempt is abandoned."),
    ] = None,
    json_summary: Annotated[
        bool, typer.Option("--json-summary", help="Print one JSON line instead of the table.")
    ] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Print tracebacks.")] = False,
) -> None:
    """Evaluate a policy on a fixed panel of ENV's SPLIT with a fixed budget (resumable)."""
    from agentenvs.rollout.cli.rollout import _interruptible
    from agentenvs.rollout.compare.eval_plan import plan_eval

    out_path = out_file or Path("out") / f"{env}-eval-{split}.jsonl"
    with friendly_errors(debug=debug):
        plan = plan_eval(
            env,
            policy=policy,
            split=split,
            preset=preset,
            tasks=tasks,
            group_size=group_size,
            overrides=parse_assignments(sets or [], "--set"),
            policy_options=parse_assignments(policy_opts or [], "--policy-opt"),
        )
        run = _interruptible(
            out_path,
            env,
            config_overrides=plan.overrides,
            tokenizer_spec=tokenizer,
            policy_name=policy,
            policy_options=plan.policy_options,
            groups=plan.tasks,
            group_size=plan.group_size,
            concurrency=concurrency,
            retries=retries,
            group_timeout=group_timeout,
            split=split,
            progress=not no_progress and not json_summary,
            extra_provenance=plan.provenance,
        )
    summary = {**run.summary, "eval": plan.provenance["eval"]}
    if json_summary:
        sys.stdout.write(json.dumps(summary, sort_keys=True) + "\n")
        sys.stdout.flush()
    else:
        out.print(summary_table(run.summary, f"{env} eval: {policy} policy on {split}"))
        sampling = "deterministic" if plan.deterministic else "sampled (not deterministic)"
        out.print(
            f"panel: the first {plan.tasks} of {split}'s tasks, group size {plan.group_size}, "
            f"{sampling}; compare it with `agentenvs compare {out_path} OTHER`",
            markup=False,
        )
    failed = run.result.failed
    if failed:
        if debug:
            run_report.print_traceback(err, failed[0])
        message = run_report.failed_groups_message(
            run.result.records, len(run.result.records), debug=debug
        )
        raise fail(message, EXIT_FAILED_GROUPS)
