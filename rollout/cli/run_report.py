"""How ``agentenvs rollout`` reports what went wrong: failed groups with where their
error was raised, the whole traceback with ``--debug``, and an interrupted run.

A failed group's record keeps its last error's traceback (``GroupRecord.traceback``);
the one-line summary names the innermost frame (file, line, function) so a bug in an
environment's ``step`` points at its line without opening the store.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.console import Console

from agentenvs.rollout.cli.common import one_line

if TYPE_CHECKING:
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
