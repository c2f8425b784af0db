"""The flags of ``agentenvs rollout`` and ``agentenvs eval`` turned into one
:class:`~agentenvs.rollout.collect.spec.RunSpec`: the only thing the run receives.

Key=value flags are parsed here (``--set``, ``--policy-opt``), ``--url`` and
``--sandbox`` are routed to the setting they stand for, and the sampling settings
among the policy options become the spec's ``sampling``. A setting out of range is
refused as its flag (``--group-timeout must be positive``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentenvs.rollout.cli import preflight
from agentenvs.rollout.cli.common import CLIError, parse_assignments
from agentenvs.rollout.cli.flag_groups import (
    DatasetFlags,
    EnvFlags,
    ExecutorFlags,
    LimitFlags,
    OutputFlags,
    PolicyFlags,
    StoreFlags,
)
from agentenvs.rollout.collect.options import CollectOptions
from agentenvs.rollout.collect.spec import (
    SAMPLING_KEYS,
    DatasetSpec,
    EnvSpec,
    ExecutorSpec,
    PolicySpec,
    RunSpec,
    SamplingSettings,
    StoreSpec,
)
from agentenvs.rollout.collect.tree import BranchSchedule

ENV_SERVER_TOKEN_VAR = "AGENTENVS_ENV_SERVER_TOKEN"


def policy_spec(
    policy: PolicyFlags, *, url: str | None = None
) -> tuple[PolicySpec, SamplingSettings]:
    """The policy and its sampling settings (``temperature``, ``top_p``, ``max_tokens``,
    ``seed`` among ``--policy-opt``); ``url`` is the policy server's ``--url``."""
    options = parse_assignments(policy.policy_opts or [], "--policy-opt")
    if url is not None:
        if "url" in options:
            raise CLIError("--url and --policy-opt url=... both name the policy server")
        options["url"] = url
    return split_sampling(policy.policy, options)


def split_sampling(name: str, options: dict[str, Any]) -> tuple[PolicySpec, SamplingSettings]:
    """``options`` as the policy's own and the sampling settings."""
    sampling = SamplingSettings(**{k: v for k, v in options.items() if k in SAMPLING_KEYS})
    own = {k: v for k, v in options.items() if k not in SAMPLING_KEYS}
    return PolicySpec(name, own), sampling


def collect_options(
    limits: LimitFlags, output: OutputFlags, *, new_run: bool = False
) -> CollectOptions:
    return CollectOptions(
        concurrency=limits.concurrency,
        retries=limits.retries,
        group_timeout=limits.group_timeout,
        new_run=new_run,
        progress=not output.no_progress and not output.json_summary,
    )


def rollout_spec(
    env: str,
    policy: PolicyFlags,
    dataset: DatasetFlags,
    env_flags: EnvFlags,
    limits: LimitFlags,
    store: StoreFlags,
    executor: ExecutorFlags,
    output: OutputFlags,
    tree: BranchSchedule | None,
) -> RunSpec:
    """``agentenvs rollout``'s spec."""
    sandbox_sets = [f"sandbox.backend={env_flags.sandbox}"] if env_flags.sandbox else []
    url_sets, policy_url = preflight.route_url(
        env_flags.url, policy=policy.policy, sandbox=env_flags.sandbox
    )
    config = parse_assignments([*(env_flags.sets or []), *sandbox_sets, *url_sets], "--set")
    if env_flags.renderer is not None:
        config["renderer"] = env_flags.renderer
    chosen, sampling = policy_spec(policy, url=policy_url)
    token = env_flags.env_server_token or os.environ.get(ENV_SERVER_TOKEN_VAR)
    return RunSpec(
        env=EnvSpec(env, config, tuple(env_flags.env_server or ()), token),
        dataset=DatasetSpec(dataset.split, dataset.groups, dataset.group_size),
        policy=chosen,
        sampling=sampling,
        tokenizer=policy.tokenizer,
        limits=collect_options(limits, output, new_run=store.new_run),
        executor=ExecutorSpec(executor.executor, executor.ray_address),
        store=StoreSpec(store.out_file or Path("out") / f"{env}.jsonl"),
        tree=tree,
    )
