"""Running a :class:`~agentenvs.rollout.collect.spec.RunSpec`: :func:`run`.

``run(spec)`` is what ``agentenvs rollout`` does, from Python: make the env config,
load the tokenizer, make the policy, the groups (local or on env servers, as trees
when asked) and the executor, collect into the store, close what was opened. The
stages are functions of their own (:func:`env_config`, :func:`prepare`,
:func:`execute`) so the command line can check each step's input before the next,
slower one starts and say what went wrong in its own words.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from agentenvs.rollout.collect.event_loop import run_bounded
from agentenvs.rollout.collect.spec import RunSpec

if TYPE_CHECKING:
    from agentenvs.envs.config import EnvConfig
    from agentenvs.envs.types import EnvGroupBuilder
    from agentenvs.rollout.collect.collector import CollectionResult
    from agentenvs.rollout.collect.executors import GroupExecutor
    from agentenvs.rollout.policies.base import Policy, PolicyFactory

TOKENIZING_POLICIES = frozenset({"hf", "openai", "interactive"})
"""Policies that tokenize themselves: they are given the tokenizer the env renders with."""


@dataclass
class PreparedRun:
    """Everything a spec names, made and ready to collect with."""

    spec: RunSpec
    config: EnvConfig
    tokenizer: Any
    policy: Policy | PolicyFactory
    builders: list[EnvGroupBuilder]
    executor: GroupExecutor


@dataclass
class RunOutcome:
    """What :func:`run` returns: the spec, the env config it made, the collection's
    result (this run's records, ok and failed, and how many groups were skipped) and
    the seconds the collection took."""

    spec: RunSpec
    config: EnvConfig
    result: CollectionResult
    seconds: float


def env_config(spec: RunSpec) -> EnvConfig:
    """The env config the spec names (an unknown key is refused by its config class),
    with the split checked (:class:`~agentenvs.envs.config.UnknownSplitError`)."""
    from agentenvs.envs.registry import make

    config = make(spec.env.name, **dict(spec.env.config))
    config.check_split(spec.dataset.split)
    return config


def policy_options(spec: RunSpec, tokenizer: Any) -> dict[str, Any]:
    """The options the policy is made with; a policy that tokenizes gets the env's
    tokenizer unless the options name one (it must tokenize as the env renders)."""
    options = spec.policy_options()
    if spec.policy.name in TOKENIZING_POLICIES and "tokenizer" not in options:
        options["tokenizer"] = tokenizer
    return options


def make_run_policy(spec: RunSpec, tokenizer: Any) -> Policy | PolicyFactory:
    from agentenvs.rollout.policies import make_policy

    return make_policy(spec.policy.name, **policy_options(spec, tokenizer))


def make_run_builders(spec: RunSpec, config: EnvConfig, tokenizer: Any) -> list[EnvGroupBuilder]:
    """One builder per group, from the config's dataset or the env servers'; as trees
    when the spec branches."""
    from agentenvs.rollout.collect.tree import as_trees

    data = spec.dataset
    if spec.env.servers:
        dataset: Any = remote_dataset(spec, config, tokenizer)
    else:
        dataset = config.dataset(
            tokenizer, group_size=data.group_size, n_groups=data.groups, split=data.split
        )
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    return as_trees(builders, spec.tree)


def remote_dataset(spec: RunSpec, config: EnvConfig, tokenizer: Any) -> Any:
    """The env servers' :class:`~agentenvs.envs.remote.RemoteDataset`. The servers must
    describe the config made here, else the records would claim one config while
    another ran (a ``ValueError`` names the keys that differ)."""
    from agentenvs.envs.remote import RemoteDataset, server_urls

    data = spec.dataset
    dataset = RemoteDataset.open(
        server_urls(list(spec.env.servers)), spec.env.name, group_size=data.group_size,
        config=dict(spec.env.config), split=data.split, n_groups=data.groups,
        tokenizer=tokenizer, token=spec.env.server_token,
    )  # fmt: skip
    if dataset.builders:
        served = dict(dataset.builders[0].describe().config)
        local = config.model_dump(mode="json")
        differ = sorted(k for k in set(served) | set(local) if served.get(k) != local.get(k))
        if differ:
            raise ValueError(
                f"the server's {spec.env.name} config differs from this one in "
                f"{', '.join(differ)}: run the same agentenvs version on both sides"
            )
    return dataset


def make_run_executor(spec: RunSpec, tokenizer: Any) -> GroupExecutor:
    from agentenvs.rollout.collect.executors.choice import make_executor

    return make_executor(
        spec.executor.kind,
        ray_address=spec.executor.ray_address,
        policy_name=spec.policy.name,
        policy_options=policy_options(spec, tokenizer),
    )


def prepare(
    spec: RunSpec, *, config: EnvConfig | None = None, tokenizer: Any = None
) -> PreparedRun:
    """Make what the spec names (``config`` and ``tokenizer`` when already made)."""
    from agentenvs.rollout.tokenizer import load_tokenizer

    config = config if config is not None else env_config(spec)
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(spec.tokenizer_spec())
    policy = make_run_policy(spec, tokenizer)
    builders = make_run_builders(spec, config, tokenizer)
    return PreparedRun(
        spec, config, tokenizer, policy, builders, make_run_executor(spec, tokenizer)
    )


async def execute(prepared: PreparedRun) -> CollectionResult:
    """Collect the prepared groups into the spec's store; close the executor and the
    policy afterwards, whatever happened."""
    from agentenvs.rollout.collect.collector import collect
    from agentenvs.rollout.collect.store import TrajectoryStore
    from agentenvs.rollout.policies.base import ClosablePolicy

    spec = prepared.spec
    options = spec.limits
    if spec.policy.name == "interactive":
        options = replace(options, progress=False)  # a redrawn bar hides what is typed
    try:
        return await collect(
            prepared.builders,
            prepared.policy,
            options,
            store=TrajectoryStore(spec.store.path) if spec.store.path is not None else None,
            keys=spec.store.keys,
            executor=prepared.executor,
            notes=spec.provenance_notes(),
        )
    finally:
        await prepared.executor.close()
        if isinstance(prepared.policy, ClosablePolicy):
            await prepared.policy.aclose()


def run(spec: RunSpec, *, tokenizer: Any = None) -> RunOutcome:
    """Run ``spec`` to the end (see the module docstring); ``tokenizer``, when given, is
    the one ``spec.tokenizer`` names, already loaded.

    Every group ends as a record in the store (``ok``, or ``failed`` naming its
    error); rerunning the same spec resumes, and a spec that differs from the store's
    run is refused (:class:`~agentenvs.rollout.collect.run_identity.RunMismatchError`)
    unless ``spec.limits.new_run``."""
    prepared = prepare(spec, tokenizer=tokenizer)
    started = time.monotonic()
    result = run_bounded(execute(prepared))
    return RunOutcome(spec, prepared.config, result, time.monotonic() - started)
