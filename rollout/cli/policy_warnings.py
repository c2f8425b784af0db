"""One line per group for a policy's warnings during ``agentenvs rollout``, then a count.

A policy server that is down makes every request of every group retry, and each
retry logs a warning: 48 lines for 2 groups said the same thing 24 times. While
a rollout runs, this filter lets the first warning of each group through (it
names the server and the error), drops the rest, and prints how many it dropped
at the end, so the terminal shows the outage and its extent, not a wall of text.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

POLICY_LOGGER = "agentenvs.rollout.policies"


class OncePerGroup(logging.Filter):
    """Passes a group's first warning; counts the others (by the collector's group key)."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped: Counter[str] = Counter()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        from agentenvs.rollout.collect.rollouts import current_group_key

        if record.levelno != logging.WARNING:
            return True
        group = current_group_key.get() or "outside any group"
        if group in self.seen:
            self.dropped[group] += 1
            return False
        self.seen.add(group)
        record.msg = f"group {group}: {record.msg}"
        return True

    def summary(self) -> str | None:
        if not self.dropped:
            return None
        total = sum(self.dropped.values())
        return (
            f"{total} more policy warning(s) like these in {len(self.dropped)} group(s) "
            "were not shown"
        )


@contextmanager
def collapsed_policy_warnings(console: Any) -> Iterator[OncePerGroup]:
    """Collapse the policies' warnings while the block runs; print the count after."""
    once = OncePerGroup()
    loggers = [
        logging.getLogger(name)
        for name in list(logging.root.manager.loggerDict)
        if name == POLICY_LOGGER or name.startswith(POLICY_LOGGER + ".")
    ]
    for logger in loggers:
        logger.addFilter(once)
    try:
        yield once
    finally:
        for logger in loggers:
            logger.removeFilter(once)
        note = once.summary()
        if note:
            console.print(f"warning: {note}", markup=False)
