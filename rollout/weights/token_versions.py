"""Which weights version sampled each token of an action, stored as runs of tokens.

A weight sync can land while an action is being sampled: with partial rollouts
(:mod:`agentenvs.rollout.policies.partial_sampling`) the request is aborted, the
new weights are loaded, and sampling goes on from the tokens already drawn. The
action then holds tokens of two (or more) versions, in order. Its turn keeps the
per-turn stamps every reader knows (``policy/weights_version`` is the *oldest*
run's, so staleness is judged by the oldest weights that produced any token) and
adds, only then, ``policy/weights_runs``: a JSON list of ``[n_tokens, version,
proof]`` runs that sum to the action's length. A turn sampled under one version
has no runs entry and reads back as one run, so stores written before stay valid.

The runs are a JSON string because a turn's logs hold scalars only
(:data:`agentenvs.envs.types.Logs`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agentenvs.envs.types import Transition

VERSION_LOG = "policy/weights_version"
"""The per-turn log key of the version that served the turn (the oldest run's)."""

Version = int | str
"""A weights version: a trainer's step number, or any label it bumps."""

RUNS_LOG = "policy/weights_runs"
"""The per-turn log key of an action's version runs (only when it has several)."""
PROOF_LOG = "policy/weights_proof"
"""The per-turn log key of the proof of the turn's (oldest) weights."""


@dataclass(frozen=True)
class VersionRun:
    """``tokens`` consecutive action tokens sampled under ``version``."""

    tokens: int
    version: Version | None
    proof: str | None = None
    """The proof the weights had when these tokens were sampled (``verified``, ...)."""

    def to_json(self) -> list[Any]:
        return [self.tokens, self.version, self.proof]


def merge_runs(runs: Iterable[VersionRun]) -> tuple[VersionRun, ...]:
    """Adjacent runs of one version (and proof) as one; empty runs dropped."""
    merged: list[VersionRun] = []
    for run in runs:
        if run.tokens <= 0:
            continue
        last = merged[-1] if merged else None
        if last is not None and (last.version, last.proof) == (run.version, run.proof):
            merged[-1] = VersionRun(last.tokens + run.tokens, run.version, run.proof)
        else:
            merged.append(run)
    return tuple(merged)


def runs_to_log(runs: Sequence[VersionRun]) -> str:
    return json.dumps([run.to_json() for run in runs], separators=(",", ":"))


def parse_runs(text: Any) -> tuple[VersionRun, ...]:
    """The runs of a ``policy/weights_runs`` entry; ValueError when it is not one."""
    try:
        rows = json.loads(text) if isinstance(text, str) else None
        if not isinstance(rows, list):
            raise ValueError("not a JSON list")
        runs = []
        for row in rows:
            tokens, version, proof = row
            if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
                raise ValueError(f"run length {tokens!r} is not a count")
            runs.append(VersionRun(tokens, version, proof))
        return tuple(runs)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{RUNS_LOG} {str(text)[:80]!r} is not a list of runs: {err}") from None


def runs_of(transition: Transition) -> tuple[VersionRun, ...]:
    """The action's runs: the stored ones, else one run of the turn's stamped version
    (none for an unstamped turn or an empty action). ValueError on a malformed entry."""
    logs = transition.logs
    if RUNS_LOG in logs:
        return parse_runs(logs[RUNS_LOG])
    n = len(transition.ac.tokens)
    if VERSION_LOG not in logs or n == 0:
        return ()
    proof = logs.get(PROOF_LOG)
    return (VersionRun(n, logs[VERSION_LOG], str(proof) if proof is not None else None),)


def token_versions(transition: Transition) -> list[Version | None]:
    """One version per action token (None everywhere for an unstamped turn). Runs
    that do not fit the action (malformed, the wrong total) give the turn's stamped
    version on every token, so the list always matches the tokens;
    :func:`runs_problem` is what reports them (``agentenvs check``)."""
    n = len(transition.ac.tokens)
    try:
        runs = runs_of(transition)
    except ValueError:
        runs = ()
    if sum(run.tokens for run in runs) != n:
        return [transition.logs.get(VERSION_LOG)] * n
    out: list[Version | None] = []
    for run in runs:
        out += [run.version] * run.tokens
    return out


def runs_problem(transition: Transition) -> str | None:
    """Why a turn's runs cannot be true, or None: they must parse, sum to the
    action's length, start with the turn's stamped version, and never go back to
    an older version (weights only move forward during one action)."""
    if RUNS_LOG not in transition.logs:
        return None
    try:
        runs = parse_runs(transition.logs[RUNS_LOG])
    except ValueError as err:
        return str(err)
    total, n = sum(run.tokens for run in runs), len(transition.ac.tokens)
    if total != n:
        return f"its version runs cover {total} tokens but the action has {n}"
    if runs and runs[0].version != transition.logs.get(VERSION_LOG):
        return (
            f"its first run's version {runs[0].version!r} is not the turn's stamped "
            f"version {transition.logs.get(VERSION_LOG)!r}"
        )
    versions = [run.version for run in runs]
    if not all(isinstance(v, int) for v in versions):
        return None  # labels that are not numbers cannot be ordered
    if any(b <= a for a, b in itertools.pairwise(versions)):  # type: ignore[operator]
        return f"its version runs {versions} do not move forward"
    return None
