"""Which process answers at a server's address: its start time, read from ``/metrics``.

A restarted server answers at the same address with different weights, and a
client whose pooled connection was closed opens a new one without any error to
see. vLLM's ``/metrics`` carries the Prometheus process collector's
``process_start_time_seconds`` of the API server process (13 ms a read here), so a
change of it is a new instance. A server without it (an older vLLM, SGLang) is
not watched this way; connection errors still lose the proof.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from agentenvs.rollout.policies.base import PolicyError

if TYPE_CHECKING:
    from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy

_START_TIME = re.compile(r"^process_start_time_seconds\s+(\S+)\s*$", re.MULTILINE)


def start_time(metrics_text: str) -> str | None:
    """The API server's start time in a Prometheus text page, as written there."""
    found = _START_TIME.search(metrics_text)
    return found.group(1) if found else None


class ServerInstances:
    """The instance each of a policy's servers was when its weights were proven."""

    def __init__(self, policy: OpenAICompatPolicy, interval: float) -> None:
        if interval <= 0:
            raise ValueError(f"instance_check_interval must be > 0, got {interval!r}")
        self.policy = policy
        self.interval = interval
        self.known: dict[str, str] = {}
        """Server -> start time at the last proof (or the first read after it)."""
        self._checked = -float("inf")

    async def read(self, server: str) -> str | None:
        try:
            page = await self.policy.request("GET", "/metrics", None, server=server)
        except PolicyError as err:
            if err.status in (404, 405):
                return None  # no metrics endpoint: not watched
            raise
        return start_time(str(page.get("text", "")))

    async def record(self) -> None:
        """Read every server now: the instances a proof was made on."""
        self.known = {}
        for server in self.policy.urls:
            marker = await self.read(server)
            if marker is not None:
                self.known[server] = marker
        self._checked = time.monotonic()

    async def check_due(self) -> None:
        """Compare every server with its recorded instance, at most once an interval;
        a new one takes the proof away."""
        now = time.monotonic()
        if now - self._checked < self.interval:
            return
        self._checked = now
        for server in self.policy.urls:
            try:
                marker = await self.read(server)
            except PolicyError as err:
                self.policy.custody.lose(f"{server}: its /metrics did not answer ({err})")
                continue
            known = self.known.get(server)
            if marker is not None and known is not None and marker != known:
                self.policy.custody.lose(
                    f"{server} is a new server instance (started at {marker}, "
                    f"the proof was made on the one started at {known})"
                )
            elif marker is not None and known is None:
                self.known[server] = marker
