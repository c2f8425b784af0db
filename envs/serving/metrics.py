"""``GET /metrics``: the env server's counters in Prometheus' text format.

Requests and their latency per route (the route's template, so session ids do not
make a series each), answers per status, steps played, and the session table's
size and history (opened, closed, expired by the idle timeout).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentenvs.envs.serving.sessions import SessionTable


@dataclass
class ServerMetrics:
    table: SessionTable
    steps: int = 0
    requests: Counter[str] = field(default_factory=Counter)
    seconds: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)

    def count_status(self, status: int) -> None:
        self.statuses[status] += 1

    def observe(self, route: str, status: int, seconds: float) -> None:
        self.requests[route] += 1
        self.seconds[route] += seconds
        self.statuses[status] += 1

    def render(self) -> str:
        lines = [
            "# TYPE agentenvs_env_requests_total counter",
            *(f'agentenvs_env_requests_total{{route="{p}"}} {n}' for p, n in self.requests.items()),
            "# TYPE agentenvs_env_request_seconds_total counter",
            *(
                f'agentenvs_env_request_seconds_total{{route="{p}"}} {s:.6f}'
                for p, s in self.seconds.items()
            ),
            "# TYPE agentenvs_env_responses_total counter",
            *(
                f'agentenvs_env_responses_total{{status="{s}"}} {n}'
                for s, n in sorted(self.statuses.items())
            ),
            "# TYPE agentenvs_env_steps_total counter",
            f"agentenvs_env_steps_total {self.steps}",
            "# TYPE agentenvs_env_groups_open gauge",
            f"agentenvs_env_groups_open {len(self.table.groups)}",
            "# TYPE agentenvs_env_envs_open gauge",
            f"agentenvs_env_envs_open {len(self.table.envs)}",
            "# TYPE agentenvs_env_groups_closed_total counter",
            f"agentenvs_env_groups_closed_total {self.table.closed_total}",
            "# TYPE agentenvs_env_groups_expired_total counter",
            f"agentenvs_env_groups_expired_total {self.table.expired_total}",
        ]
        return "\n".join(lines) + "\n"
