"""How ``agentenvs rollout`` and ``eval`` report a run: the summary (:func:`report_run`),
failed groups with where their error was raised, the whole traceback with
``--debug``, and an interrupted run.

A failed group's record keeps its last error's traceback (``GroupRecord.traceback``);
the one-line summary names the innermost frame (file, line, function) so a bug in an
environment's ``step`` points at its line without opening the store.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console

from agentenvs.rollout.cli.common import one_line

if TYPE_CHECKING:
    from agentenvs.rollout.cli.flag_groups import OutputFlags
    from agentenvs.rollout.cli.rollout_run import RolloutRun
    from agentenvs.rollout.collect.records import GroupRecord

_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)', re.M)


def raising_frame(traceback_text: str | None) -> str | None:
    """``"my_env.py:42 in step"``: the innermost frame of a stored traceback."""
    frames = list(_FRAME.finditer(traceback_text or ""))
    if not frames:
        return None
    last = frames[-1]
    return f"{last['file']}:{last['line']} in {last['func']}"


def failed_groups_message(records: list[GroupRecord], total: int, *, debug: bool) -> str:
    """One line: how many failed, the first one's error and where it was raised."""
    failed = [r for r in records if r.status == "failed"]
    first = failed[0]
    where = raising_frame(first.traceback)
    text = (
        f"{len(failed)} of {total} groups failed (stored as failed; a rerun retries them). "
        f"First ({first.key}): {one_line(first.error or 'unknown error')}"
    )
    if where:
        text += f" at {where}"
    if first.traceback and not debug:
        text += "; --debug prints its traceback (also stored in the record's `traceback`)"
    return text


def print_traceback(console: Console, record: GroupRecord) -> None:
    """The failed record's whole stored traceback, as Python printed it."""
    if record.traceback:
        console.print(f"traceback of group {record.key}:", markup=False)
        console.print(record.traceback.rstrip(), markup=False, highlight=False)


def interrupted_message(stored: int, path: object) -> str:
    """What an interrupted run kept, and how to go on."""
    noun = "group" if stored == 1 else "groups"
    return (
        f"interrupted: {stored} {noun} of this run stored in {path}; "
        "rerun the same command to resume (stored groups are skipped)"
    )


def report_run(
    run: RolloutRun,
    output: OutputFlags,
    title: str,
    *,
    extra: dict[str, Any] | None = None,
    notes: Sequence[str] = (),
) -> None:
    """Print a finished run as ``agentenvs rollout`` and ``eval`` do: one JSON line
    (``--json-summary``: the summary with ``extra``, :func:`rounded`) or the table and
    ``notes``; then fail with exit 1 naming the first failed group, if any."""
    from agentenvs.rollout.cli.common import EXIT_FAILED_GROUPS, err, fail, out
    from agentenvs.rollout.cli.summary import summary_table

    if output.json_summary:
        line = json.dumps(rounded({**run.summary, **(extra or {})}), sort_keys=True)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    else:
        out.print(summary_table(run.summary, title))
        for note in notes:
            out.print(note, markup=False)
    failed = run.result.failed
    if failed:
        if output.debug:
            print_traceback(err, failed[0])
        message = failed_groups_message(
            run.result.records, len(run.result.records), debug=output.debug
        )
        raise fail(message, EXIT_FAILED_GROUPS)


SUMMARY_DECIMALS = 6


def rounded(value: Any) -> Any:
    """Every float in ``value`` to :data:`SUMMARY_DECIMALS` decimals: a mean of -1.0
    rewards is -1.0, not ``-0.9999999999999998`` (float sums), and a spread of zero is
    0.0, not ``1.1e-16``."""
    if isinstance(value, float):
        return round(value, SUMMARY_DECIMALS) + 0.0  # + 0.0: no -0.0
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(item) for item in value]
    return value
