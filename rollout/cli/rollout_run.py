"""The run behind ``agentenvs rollout``, callable from Python: :func:`run_rollout` checks the
options, builds the env, tokenizer and policy, collects into a resumable store and returns
what the command prints (the demo and benchmarks call it too)."""

from __future__ import annotations

import asyncio
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentenvs.rollout.cli import preflight
from agentenvs.rollout.cli import tree_options as trees
from agentenvs.rollout.cli.common import (
    CLIError,
    err,
    load_tokenizer_or_fail,
    one_line,
    resolve_tokenizer_spec,
)
from agentenvs.rollout.cli.policy_warnings import collapsed_policy_warnings
from agentenvs.rollout.cli.run_provenance import run_provenance
from agentenvs.rollout.cli.summary import throughput, tool_calls_summary

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
    env_servers: list[str] | None = None,
    env_server_token: str | None = None,
    extra_provenance: dict[str, Any] | None = None,
) -> RolloutRun:
    """What ``agentenvs rollout`` does, callable from Python (the demo uses it); with
    ``tree``, as tree rollouts. ``extra_provenance`` adds sections to every record's
    provenance (``agentenvs eval`` records its panel, budget and weights hash there)."""
    from agentenvs.envs.registry import make
    from agentenvs.rollout.collect.collector import AllGroupsSkipped, collect, summarize
    from agentenvs.rollout.collect.options import OptionError, check_at_least, check_collect_options
    from agentenvs.rollout.collect.store import TrajectoryStore
    from agentenvs.rollout.policies.base import ClosablePolicy

    try:  # the collector's own checks, the options spelled as flags
        check_at_least("groups", groups, 1)
        check_at_least("group_size", group_size, 1)
        check_collect_options(concurrency=concurrency, retries=retries, group_timeout=group_timeout)
    except OptionError as error:
        raise CLIError(error.as_flag()) from None
    options = dict(policy_options or {})
    preflight.check_policy(policy_name, options)  # before a tokenizer loads (seconds)
    config = make(env_name, **(config_overrides or {}))
    if not env_servers:  # a missing extra, named before anything runs (remote envs: theirs)
        preflight.check_requirements(config)
    try:
        config.check_split(split)
    except ValueError as error:
        raise CLIError(f"--split: {error}") from None
    if policy_name == "openai":
        asyncio.run(preflight.probe_servers(preflight.server_urls(options["url"])))
    if policy_name == "interactive":
        progress = False  # a bar redrawn over the input line hides what is typed
    spec = resolve_tokenizer_spec(tokenizer_spec, policy_name, options)
    if tokenizer is None:
        tokenizer = load_tokenizer_or_fail(spec)
    if policy_name in ("hf", "openai", "interactive") and "tokenizer" not in options:
        options["tokenizer"] = tokenizer  # the policy must tokenize as the env renders
    policy = make_policy_or_fail(policy_name, options)
    try:
        if env_servers:  # the envs run on env servers (rollout/cli/remote_envs.py)
            from agentenvs.rollout.cli.remote_envs import remote_dataset

            dataset = remote_dataset(
                env_servers, env_name, overrides=dict(config_overrides or {}),
                local_config=config.model_dump(mode="json"), tokenizer=tokenizer,
                group_size=group_size, n_groups=groups, split=split, token=env_server_token,
            )  # fmt: skip
        else:
            dataset = config.dataset(tokenizer, group_size=group_size, n_groups=groups, split=split)
    except ValueError as error:
        raise CLIError(one_line(str(error))) from None
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    if policy_name == "scripted" and builders:
        variant = str(options.get("variant", "oracle"))
        asyncio.run(preflight.check_scripted_variant(builders[0], variant))
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
    provenance.update(extra_provenance or {})
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
    with collapsed_policy_warnings(err), warnings.catch_warnings():
        warnings.simplefilter("ignore", AllGroupsSkipped)  # said below, in the CLI's words
        result = asyncio.run(go())
    elapsed = time.monotonic() - started
    if result.skipped and not result.records:
        err.print(
            f"note: all {result.skipped} groups are already stored in {out_path} (this run "
            "finished before): nothing ran. Another --out, or --new-run, collects again",
            markup=False,
        )
    summary = {
        **summarize(result.records),
        **trees.tree_summary(result.records, tree),
        "skipped": result.skipped,
        "out": str(out_path),
        **throughput(result.records, elapsed),
        **tool_calls_summary(result.records),
    }
    return RolloutRun(env_name, config, result, summary, out_path)
