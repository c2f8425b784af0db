"""A judge's verdict: the raw text, the score read from it, and why reading failed.

A judge that rambles, refuses or runs out of tokens gives no score; treating that as
0 silently trains on a reward nobody gave. So every verdict carries a status, the
records store it with the raw text, and ``agentenvs check`` fails a run holding
verdicts that did not parse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

VerdictStatus = Literal["ok", "no_score", "out_of_range", "empty", "http_error"]
"""``ok``: a score in range was read. ``no_score``: the text holds no ``SCORE: N``
line. ``out_of_range``: it does, outside ``min_score..max_score``. ``empty``: the
judge answered with no text. ``http_error``: no answer after every retry (or an
error not worth retrying, such as 400 or 404)."""

FAILED_STATUSES: frozenset[str] = frozenset({"no_score", "out_of_range", "empty", "http_error"})

_SCORE = re.compile(r"score\s*[:=]\s*\**\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)

LOG_PREFIX = "judge/"
"""Step logs and metrics of a judged episode are named ``judge/<field>``."""


@dataclass(frozen=True)
class ParsedScore:
    status: VerdictStatus
    score: float | None


def parse_score(text: str, min_score: float, max_score: float) -> ParsedScore:
    """The last ``SCORE: N`` of ``text`` (case-insensitive; ``=`` and markdown bold
    allowed), checked against the range. The last one counts: a judge that restates
    the instructions before answering mentions the form first."""
    if not text.strip():
        return ParsedScore("empty", None)
    found = _SCORE.findall(text)
    if not found:
        return ParsedScore("no_score", None)
    score = float(found[-1])
    if not min_score <= score <= max_score:
        return ParsedScore("out_of_range", score)
    return ParsedScore("ok", score)


@dataclass(frozen=True)
class Verdict:
    """What a judge said about one episode, and what it made of the reward."""

    status: VerdictStatus
    score: float | None
    """The score as read (in the judge's own range); None when none was read."""
    reward: float
    """The judged reward: ``weight`` times the score scaled to 0..1, or the
    failure reward when the verdict failed."""
    text: str
    """The judge's raw answer ("" after an HTTP failure)."""
    model: str
    prompt_sha256: str
    weights: str = ""
    """The judge's weights label when they are ours (``base:judge@1a2b3c4d``)."""
    error: str = ""
    """The HTTP or transport error, for ``http_error``."""
    attempts: int = 0
    """Requests made for this verdict (0 when it came from the cache)."""
    cached: bool = False
    transient: bool = False
    """For ``http_error``: the judge could not be reached or stayed busy (connection
    errors, timeouts, 408/409/429/5xx after every retry), so asking later may answer;
    False for an answer that will not change (404 model, 400 body, unreadable JSON)."""

    @property
    def failed(self) -> bool:
        return self.status in FAILED_STATUSES

    def logs(self) -> dict[str, str | float | int]:
        """The verdict as step logs (strings and numbers only, as logs are)."""
        logs: dict[str, str | float | int] = {
            f"{LOG_PREFIX}status": self.status,
            f"{LOG_PREFIX}verdict": self.text,
            f"{LOG_PREFIX}model": self.model,
            f"{LOG_PREFIX}prompt_sha256": self.prompt_sha256,
            f"{LOG_PREFIX}cached": int(self.cached),
            f"{LOG_PREFIX}attempts": self.attempts,
        }
        if self.score is not None:
            logs[f"{LOG_PREFIX}score"] = self.score
        if self.weights:
            logs[f"{LOG_PREFIX}weights"] = self.weights
        if self.error:
            logs[f"{LOG_PREFIX}error"] = self.error
        return logs

    def metrics(self) -> dict[str, float | int]:
        """Numbers a training loop averages: the judged reward and whether it failed."""
        return {f"{LOG_PREFIX}reward": self.reward, f"{LOG_PREFIX}failed": int(self.failed)}
