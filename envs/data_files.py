"""Reading the data files environments ship or users pass (questions, problems, corpora).

One error, :class:`DataError`, for a file that cannot be used, whichever environment
reads it; and one reader of JSON Lines, so every environment skips blank lines and
names the line that is not JSON the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from agentenvs.envs.errors import AgentEnvsError


class DataError(AgentEnvsError, ValueError):
    """A data file that cannot be used; the message names the file and the line or row."""


def json_lines(
    lines: Iterable[str],
    where: Callable[[int], str],
    error: Callable[[str], Exception] = DataError,
) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line, numbered from 1.

    A line that is not JSON raises ``error`` with ``where(number)`` in front of the
    parser's complaint, so the message says which file and line to fix.
    """
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise error(f"{where(number)}: not JSON ({err.msg})") from None
        yield number, value
