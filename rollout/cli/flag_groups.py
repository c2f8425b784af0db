"""The run options in frozen groups, and the decorator that hands a command one value
per group (:func:`with_flag_groups`).

A command's signature names one value per group (:class:`PolicyFlags`,
:class:`LimitFlags`, :class:`OutputFlags`, ...); typer is shown each group's options
(:mod:`~.options`) instead, and the command turns its groups into a
:class:`~agentenvs.rollout.collect.spec.RunSpec` (:mod:`~.run_spec`).
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from agentenvs.rollout.cli.options import (
    Concurrency,
    Debug,
    EnvServers,
    EnvServerToken,
    Executor,
    Groups,
    GroupSize,
    GroupTimeout,
    JsonSummary,
    NewRun,
    NoProgress,
    OutFile,
    PolicyName,
    PolicyOpts,
    Preset,
    RayAddress,
    Renderer,
    RenderTokenizer,
    Retries,
    Sandbox,
    Sets,
    Split,
    Tasks,
    Url,
)


@dataclass(frozen=True)
class PolicyFlags:
    """Which policy samples, and with which tokenizer the envs render."""

    policy: PolicyName = "scripted"
    policy_opts: PolicyOpts = None
    tokenizer: RenderTokenizer = None


@dataclass(frozen=True)
class LimitFlags:
    """The collection's limits."""

    concurrency: Concurrency = 8
    retries: Retries = 1
    group_timeout: GroupTimeout = None


@dataclass(frozen=True)
class OutputFlags:
    """What the command prints."""

    json_summary: JsonSummary = False
    no_progress: NoProgress = False
    debug: Debug = False


@dataclass(frozen=True)
class DatasetFlags:
    """``agentenvs rollout``'s groups: how many, how large, of which split."""

    groups: Groups = 8
    group_size: GroupSize = 4
    split: Split = "train"


@dataclass(frozen=True)
class PanelFlags:
    """``agentenvs eval``'s panel: the split's first tasks, with a preset's budget."""

    split: Split = "test"
    preset: Preset = None
    tasks: Tasks = None
    group_size: GroupSize = 1


@dataclass(frozen=True)
class EnvFlags:
    """The env config and where the env runs."""

    sets: Sets = None
    renderer: Renderer = None
    sandbox: Sandbox = None
    url: Url = None
    env_server: EnvServers = None
    env_server_token: EnvServerToken = None


@dataclass(frozen=True)
class StoreFlags:
    out_file: OutFile = None
    new_run: NewRun = False


@dataclass(frozen=True)
class ExecutorFlags:
    executor: Executor = "in-process"
    ray_address: RayAddress = None


def with_flag_groups(command: Callable[..., Any]) -> Callable[..., Any]:
    """Show typer each group's options in place of a parameter annotated with the group
    (a frozen dataclass whose fields are annotated options); hand the command one
    value per group.

    Why: a command that takes two dozen options otherwise has two dozen parameters,
    and every command repeats them. Field names must be unique within a command."""
    signature = inspect.signature(command, eval_str=True)
    groups: dict[str, type] = {}
    params: list[inspect.Parameter] = []
    keyword = inspect.Parameter.KEYWORD_ONLY
    for param in signature.parameters.values():
        if is_dataclass(param.annotation) and isinstance(param.annotation, type):
            groups[param.name] = param.annotation
            params += [
                inspect.Parameter(name, keyword, default=default, annotation=kind)
                for name, kind, default in _group_options(param.annotation)
            ]
        else:  # after a group, typer passes everything by name
            params.append(param.replace(kind=keyword) if groups else param)

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for name, group in groups.items():
            kwargs[name] = group(**{f.name: kwargs.pop(f.name) for f in fields(group)})
        return command(*args, **kwargs)

    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    del wrapper.__wrapped__  # typer must read the signature above, not the command's
    return wrapper


def _group_options(group: type) -> list[tuple[str, Any, Any]]:
    """``(name, annotation, default)`` of each field of a flag group."""
    hints = typing.get_type_hints(group, include_extras=True)
    return [(f.name, hints[f.name], f.default) for f in fields(group)]
