"""The tree-rollout options of ``agentenvs rollout`` (``--branch-factor``, ``--branch-at``, ...).

Kept apart from the command so the command only threads one value through: the
:class:`~agentenvs.rollout.collect.tree.BranchSchedule` these options describe, or
None for ordinary (independent) rollouts.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from agentenvs.rollout.cli.common import CLIError, friendly_errors
from agentenvs.rollout.collect.tree import BranchSchedule, as_trees, tree_summary

__all__ = ["BranchSchedule", "as_trees", "branch_schedule", "tree_summary"]

BranchFactor = Annotated[
    int | None,
    typer.Option(
        "--branch-factor",
        metavar="K",
        help="Tree rollouts: fork each live episode K ways at every branch point.",
    ),
]
BranchAt = Annotated[
    str | None,
    typer.Option(
        "--branch-at",
        metavar="T,T",
        help="Turns (from 1) before whose action every live episode branches, e.g. 1,2.",
    ),
]
MaxLeaves = Annotated[
    int | None, typer.Option("--max-leaves", metavar="N", help="Cap on leaves per group.")
]
BranchEntropy = Annotated[
    float | None,
    typer.Option(
        "--branch-entropy",
        metavar="NATS",
        help="Also branch after an observation when the next action's first tokens have a "
        "mean negative logprob above NATS (ARPO-style; needs a policy with logprobs).",
    ),
]
BranchEntropyTokens = Annotated[
    int,
    typer.Option(
        "--branch-entropy-tokens", metavar="N", help="First tokens the entropy trigger reads."
    ),
]
MaxLiveForks = Annotated[
    int, typer.Option("--max-live-forks", metavar="N", help="Forks open at once per group.")
]


OPTIONS: dict[str, tuple[Any, Any]] = {
    "branch_factor": (BranchFactor, None),
    "branch_at": (BranchAt, None),
    "max_leaves": (MaxLeaves, None),
    "branch_entropy": (BranchEntropy, None),
    "branch_entropy_tokens": (BranchEntropyTokens, 8),
    "max_live_forks": (MaxLiveForks, 64),
}
"""The options :func:`with_tree_options` adds: name -> (annotation, default)."""


def with_tree_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a typer command the tree options and hand it their schedule as ``tree``.

    Why a decorator: the rollout command's module stays the size of its own job; the
    options, their parsing and their errors live here. The command declares
    ``tree: BranchSchedule | None = None``; typer sees the options instead.
    """
    signature = inspect.signature(command, eval_str=True)
    kept = [p for p in signature.parameters.values() if p.name != "tree"]
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind)
        for name, (kind, default) in OPTIONS.items()
    ]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = [kwargs.pop(name, default) for name, (_, default) in OPTIONS.items()]
        with friendly_errors():  # a bad option is one error line, as in the command
            tree = branch_schedule(*values)
        return command(*args, tree=tree, **kwargs)

    params = [*kept, *added]
    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    del wrapper.__wrapped__  # typer must read the signature above, not the command's
    return wrapper


def parse_turns(text: str) -> tuple[int, ...]:
    try:
        turns = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise CLIError(f"--branch-at takes turn numbers like 1,2; got {text!r}") from None
    if not turns:
        raise CLIError("--branch-at needs at least one turn number")
    return turns


def branch_schedule(
    branch_factor: int | None,
    branch_at: str | None,
    max_leaves: int | None,
    entropy: float | None,
    entropy_tokens: int,
    max_live_forks: int,
) -> BranchSchedule | None:
    """The schedule the options ask for; None when no tree option was given."""
    if branch_factor is None and branch_at is None and entropy is None:
        if max_leaves is not None:
            raise CLIError(
                "--max-leaves applies to tree rollouts: add --branch-at or --branch-entropy"
            )
        return None
    if branch_at is None and entropy is None:
        raise CLIError("--branch-factor needs --branch-at (turns) or --branch-entropy (a trigger)")
    try:
        return BranchSchedule(
            branch_at=parse_turns(branch_at) if branch_at is not None else (),
            branch_factor=2 if branch_factor is None else branch_factor,
            max_leaves=max_leaves,
            entropy_threshold=entropy,
            entropy_tokens=entropy_tokens,
            max_live_forks=max_live_forks,
        )
    except ValueError as error:
        raise CLIError(str(error)) from None
