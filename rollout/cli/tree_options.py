"""The tree-rollout options of ``agentenvs rollout`` (``--branch-factor``, ``--branch-at``, ...).

One flag group (:class:`TreeFlags`, see :mod:`~.flag_groups`), kept apart from the command:
the command only asks it for the
:class:`~agentenvs.rollout.collect.tree.BranchSchedule` these options describe, or
None for ordinary (independent) rollouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from agentenvs.rollout.cli.common import CLIError
from agentenvs.rollout.collect.tree import BranchSchedule, tree_summary

__all__ = ["BranchSchedule", "TreeFlags", "branch_schedule", "tree_summary"]

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


@dataclass(frozen=True)
class TreeFlags:
    """The tree options; :meth:`schedule` is what they ask for."""

    branch_factor: BranchFactor = None
    branch_at: BranchAt = None
    max_leaves: MaxLeaves = None
    branch_entropy: BranchEntropy = None
    branch_entropy_tokens: BranchEntropyTokens = 8
    max_live_forks: MaxLiveForks = 64

    def schedule(self) -> BranchSchedule | None:
        return branch_schedule(
            self.branch_factor,
            self.branch_at,
            self.max_leaves,
            self.branch_entropy,
            self.branch_entropy_tokens,
            self.max_live_forks,
        )


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
