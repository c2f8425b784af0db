"""A collection's options and their checks, shared by every way of starting one.

``collect()``, :class:`~agentenvs.rollout.collect.streaming.StreamingCollection`,
a :class:`~agentenvs.rollout.collect.spec.RunSpec` and ``agentenvs rollout`` take
the same settings (:class:`CollectOptions`: concurrency, retries, a group timeout,
...; one key per group), so they refuse bad ones with the same rule and the same
words; the CLI only spells the option as its flag (``--group-timeout``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.rollout.data.advantages import Estimator


class OptionError(AgentEnvsError, ValueError):
    """A collection setting out of range: ``option`` must satisfy ``rule``, was ``value``."""

    def __init__(self, option: str, rule: str, value: Any) -> None:
        self.option = option
        self.rule = rule
        self.value = value
        super().__init__(f"{option} {rule}, got {value}")

    def as_flag(self) -> str:
        """The message with the option spelled as a command-line flag."""
        return f"--{self.option.replace('_', '-')} {self.rule}, got {self.value}"


def check_at_least(option: str, value: int, low: int) -> None:
    if value < low:
        rule = "must be 0 or more" if low == 0 else f"must be at least {low}"
        raise OptionError(option, rule, value)


def check_positive(option: str, value: float) -> None:
    if value <= 0:
        raise OptionError(option, "must be positive", value)


def check_collect_options(
    *, concurrency: int = 1, retries: int = 0, group_timeout: float | None = None
) -> None:
    """Raise :class:`OptionError` for the first setting out of range."""
    check_at_least("concurrency", concurrency, 1)
    check_at_least("retries", retries, 0)
    if group_timeout is not None:
        check_positive("group_timeout", group_timeout)


def check_keys(keys: Sequence[str], groups: int) -> None:
    """One unique key per group (a key names a group in the store)."""
    if len(keys) != groups:
        raise ValueError(f"{len(keys)} keys for {groups} builders: need one unique key per builder")
    duplicates = [k for k, n in Counter(keys).items() if n > 1]
    if duplicates:
        raise ValueError(f"need one unique key per builder; repeated: {duplicates[:5]}")


@dataclass(frozen=True)
class CollectOptions:
    """How a collection runs its groups; checked when made (:class:`OptionError`).

    One value instead of a row of keywords, so ``collect()``, streaming collection and
    a run spec take the same settings and a call site names only what it changes:
    ``collect(builders, policy, CollectOptions(concurrency=4, progress=False))``."""

    concurrency: int = 8
    """Groups in flight at once."""
    retries: int = 1
    """Extra attempts per group, each with fresh envs."""
    group_timeout: float | None = None
    """Seconds before a group attempt is abandoned (None: no limit)."""
    new_run: bool = False
    """Append a new run to a store whose latest run is another one (else refused)."""
    progress: bool = True
    """A progress bar on a terminal; a line now and then elsewhere."""
    advantage_estimator: Estimator = "grpo"
    """How each ok record's advantages are computed (stored with the estimator)."""
    normalize_std: bool | None = None
    """Whether group advantages are divided by the group's spread (None: the estimator's)."""

    def __post_init__(self) -> None:
        check_collect_options(
            concurrency=self.concurrency, retries=self.retries, group_timeout=self.group_timeout
        )
