"""``agentenvs check``: the checks a careful person runs before trusting a run's data.

Moving an RL run between trainers goes wrong in a few recurring ways: the input
settings changed mid-run, logprobs or masks drifted off their tokens, advantages
leaked onto environment tokens or were normalised differently than claimed,
samples came from stale or unproven weights, a trainer re-tokenized text the policy
never saw as those tokens, or something upstream of the record wrote self-consistent
wrong data (which ``--replay`` re-derives). Each check reads the data itself (a
trajectory store, or a hand-off: JSONL samples, a verl batch file, a Tinker/PyTRIO
datum file) and names the first offending group, trajectory, turn and token.

This module is the entry point; the store is checked one group at a time by
``store_check.py``, hand-offs by ``handoff_check.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.inspect.findings import Check, CheckReport, Finding, Status
from agentenvs.rollout.inspect.handoff_check import check_samples, with_store_findings
from agentenvs.rollout.inspect.handoff_forms import FileKind, file_kind, read_handoff
from agentenvs.rollout.inspect.image_checks import sample_image_findings
from agentenvs.rollout.inspect.options import CheckOptions
from agentenvs.rollout.inspect.rescore import Rescorer
from agentenvs.rollout.inspect.sample_checks import LOGPROB_ROUNDING
from agentenvs.rollout.inspect.store_check import check_stream, digested, read_lines
from agentenvs.rollout.weights.drift import DriftReport

__all__ = [
    "CHECKS",
    "LOGPROB_ROUNDING",
    "Check",
    "CheckOptions",
    "CheckReport",
    "FileKind",
    "Finding",
    "Status",
    "check_file",
    "check_records",
    "check_samples",
    "file_kind",
]

CHECKS = tuple(Check)
"""Every check, in the order the docs and reports list them."""


def check_records(
    records: Iterable[GroupRecord],
    options: CheckOptions | None = None,
    *,
    source: str = "",
    tokenizer: Any = None,
    drift: Sequence[DriftReport] | None = None,
    every_line: Iterable[GroupRecord] | None = None,
    rescorer: Rescorer | None = None,
    **settings: Any,
) -> CheckReport:
    """Every check on a store's records. ``every_line``, all records in file order,
    lets a group stored twice be caught (otherwise ``records`` are taken as the
    store's latest outcomes); ``drift``, the trainer's drift reports
    (:mod:`agentenvs.rollout.weights.drift`), fails records of a batch that alarmed;
    ``rescorer`` compares the recorded logprobs with a local model's
    (``inspect/rescore.py``). ``settings`` are :class:`CheckOptions` fields
    (``current_version=``, ``replay=``...)."""
    lines = every_line if every_line is not None else records
    return check_stream(
        digested(lines),
        source=source,
        tokenizer=tokenizer,
        options=CheckOptions.of(options, **settings),
        drift=drift,
        rescorer=rescorer,
    )


def check_file(
    path: str | Path,
    options: CheckOptions | None = None,
    *,
    tokenizer: Any = None,
    reference: str | Path | None = None,
    rescorer: Rescorer | None = None,
    drift: Sequence[DriftReport] | None = None,
    **settings: Any,
) -> CheckReport:
    """Check a trajectory store or a hand-off (JSONL samples, a verl batch file, a
    datum file); the kind is detected. ``reference`` is the trajectory store a
    hand-off was made from. ``settings`` are :class:`CheckOptions` fields."""
    path = Path(path)
    options = CheckOptions.of(options, **settings)
    kind = file_kind(path)
    if kind == "trajectories":
        return check_stream(
            read_lines(path),
            source=str(path),
            tokenizer=tokenizer,
            options=options,
            drift=drift,
            rescorer=rescorer,
        )
    return check_handoff(
        path, kind, options, tokenizer=tokenizer, reference=reference, rescorer=rescorer
    )


def check_handoff(
    path: Path,
    kind: FileKind,
    options: CheckOptions,
    *,
    tokenizer: Any = None,
    reference: str | Path | None = None,
    rescorer: Rescorer | None = None,
) -> CheckReport:
    """A hand-off alone, or with the store it was made from (then the store too)."""
    from agentenvs.rollout.collect.store import read_store

    hand = read_handoff(path, kind)
    records = None
    if reference is not None:
        records = [r for r in read_store(reference).latest() if r.status == "ok" and r.group]
    report = check_samples(
        hand.samples,
        hand.extras,
        source=str(path),
        reference=records,
        tokenizer=tokenizer,
        options=options,
        rescorer=rescorer,
    )
    report.stats["form"] = hand.form
    report.findings[1:1] = hand.findings
    report.findings += sample_image_findings(hand.samples, reference, records)  # images only
    if reference is not None:
        store = check_stream(
            read_lines(reference), source=str(reference), tokenizer=tokenizer, options=options
        )
        with_store_findings(report, store)
    return report
