"""The run behind ``agentenvs rollout`` and ``agentenvs eval``: :func:`run_rollout`.

It runs a :class:`~agentenvs.rollout.collect.spec.RunSpec` through the same stages
as :func:`agentenvs.rollout.run` (:mod:`agentenvs.rollout.collect.run`), checking
each stage's input before the next, slower one starts (:mod:`~.preflight`: the policy
and its options before a tokenizer loads, that a policy server answers, that a
scripted variant exists), says every mistake as one line naming its flag, and
returns the summary the command prints (the demo and benchmarks call it too).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from agentenvs.rollout.cli import preflight, run_report
from agentenvs.rollout.cli.common import CLIError, err, load_tokenizer_or_fail, one_line
from agentenvs.rollout.cli.policy_warnings import collapsed_policy_warnings
from agentenvs.rollout.cli.summary import throughput, tool_calls_summary
from agentenvs.rollout.collect.event_loop import run_bounded

if TYPE_CHECKING:
    from agentenvs.envs.config import EnvConfig
    from agentenvs.rollout.collect.collector import CollectionResult
    from agentenvs.rollout.collect.spec import RunSpec


@dataclass
class RolloutRun:
    env_name: str
    config: EnvConfig
    result: CollectionResult
    summary: dict[str, Any]
    out: Path


EXIT_INTERRUPTED = 130
"""What a shell reports for a command ended by Ctrl-C (128 + SIGINT)."""


def run_interruptibly(spec: RunSpec) -> RolloutRun:
    """:func:`run_rollout`; Ctrl-C ends it with what was stored and how to resume."""
    try:
        return run_rollout(spec)
    except KeyboardInterrupt:
        from agentenvs.rollout.collect.store import TrajectoryStore
        from agentenvs.rollout.collect.store_commit import wait_for_writers

        out_path = Path(str(spec.store.path))
        wait_for_writers()  # groups handed to the writer before Ctrl-C still land
        stored = len(TrajectoryStore(out_path).keys()) if out_path.exists() else 0
        err.print(run_report.interrupted_message(stored, out_path), markup=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None


def run_rollout(spec: RunSpec, *, tokenizer: Any = None) -> RolloutRun:
    """What ``agentenvs rollout`` does with ``spec`` (see the module docstring);
    ``tokenizer``, when given, is the one the spec names, already loaded."""
    from agentenvs.envs.config import UnknownSplitError
    from agentenvs.rollout.collect import run as stages
    from agentenvs.rollout.collect.collector import AllGroupsSkipped

    if spec.store.path is None:
        raise CLIError("the run needs a store (--out FILE)")
    out_path = Path(spec.store.path)
    options = spec.policy_options()
    preflight.check_policy(spec.policy.name, options)  # before a tokenizer loads (seconds)
    try:
        config = stages.env_config(spec)
    except UnknownSplitError as error:
        raise CLIError(f"--split: {error}") from None
    if not spec.env.servers:  # a missing extra, named before anything runs (remote envs: theirs)
        preflight.check_requirements(config)
    if spec.policy.name == "openai":
        run_bounded(preflight.probe_servers(preflight.server_urls(options["url"])))
    if tokenizer is None:
        tokenizer = load_tokenizer_or_fail(spec.tokenizer_spec())
    try:
        policy = stages.make_run_policy(spec, tokenizer)
    except (ValueError, TypeError, FileNotFoundError) as error:
        raise CLIError(one_line(str(error))) from None
    builders = _builders(spec, config, tokenizer)
    if spec.policy.name == "scripted" and builders:
        variant = str(options.get("variant", "oracle"))
        run_bounded(preflight.check_scripted_variant(builders[0], variant))
    try:
        executor = stages.make_run_executor(spec, tokenizer)
    except (ValueError, ImportError) as error:
        raise CLIError(one_line(str(error))) from None
    prepared = stages.PreparedRun(spec, config, tokenizer, policy, builders, executor)
    started = time.monotonic()
    with collapsed_policy_warnings(err), warnings.catch_warnings():
        warnings.simplefilter("ignore", AllGroupsSkipped)  # said below, in the CLI's words
        result = run_bounded(stages.execute(prepared))
    elapsed = time.monotonic() - started
    if result.skipped and not result.records:
        err.print(
            f"note: all {result.skipped} groups are already stored in {out_path} (this run "
            "finished before): nothing ran. Another --out, or --new-run, collects again",
            markup=False,
        )
    return RolloutRun(spec.env.name, config, result, run_summary(result, spec, elapsed), out_path)


def _builders(spec: RunSpec, config: EnvConfig, tokenizer: Any) -> list:
    from agentenvs.envs.errors import AgentEnvsError
    from agentenvs.rollout.collect.run import make_run_builders

    try:
        return make_run_builders(spec, config, tokenizer)
    except (AgentEnvsError, ValueError) as error:
        prefix = "--env-server: " if spec.env.servers else ""
        raise CLIError(prefix + one_line(str(error))) from None


def run_summary(result: CollectionResult, spec: RunSpec, elapsed: float) -> dict[str, Any]:
    """What the command prints: counts, rewards, throughput, tool calls, the store."""
    from agentenvs.rollout.collect.collector import summarize
    from agentenvs.rollout.collect.tree import tree_summary

    return {
        **summarize(result.records),
        **tree_summary(result.records, spec.tree),
        "skipped": result.skipped,
        "out": str(spec.store.path),
        **throughput(result.records, elapsed),
        **tool_calls_summary(result.records),
    }
