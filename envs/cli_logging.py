"""Logging for the command-line tools: warnings and errors on stderr, nothing below.

Shared by ``agentenvs`` and the command groups that also run on their own
(``python -m agentenvs.envs.search_r1.cli``), which must not reach up into the
rollout package for it.
"""

from __future__ import annotations

import logging


def quiet_logging() -> None:
    """Warnings and errors on stderr, nothing below, whatever a library sets its own
    logger to (bm25s turns its logger up to DEBUG when imported): the level is on the
    handler, not only on the root logger."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.setLevel(logging.WARNING)
