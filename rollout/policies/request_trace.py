"""When each sampling request was in flight, as the client saw it.

A rollout is as fast as the engine only if the engine is kept busy: as many requests
in flight as the concurrency allows, all the time. Whether it is cannot be read off
a wall time; it can be read off the requests' send and answer times. Give a policy a
:class:`RequestTrace` (``OpenAICompatPolicy(..., trace=RequestTrace())``) and every
sampling request leaves a :class:`RequestSpan`; :meth:`RequestTrace.occupancy` says
how full the engine's batch was kept, and :meth:`RequestTrace.sparkline` draws the
requests in flight over time. ``benchmarks/bench_vllm.py`` traces both agentenvs and
raw requests this way, so the two can be compared span by span.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentenvs.rollout.policies.base import current_turn

_BLOCKS = " ▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class RequestSpan:
    """One sampling request: when it left and when its answer was read.

    Times are :func:`time.perf_counter` seconds. ``waited`` is how long the request
    waited for a concurrency slot (and a weight sync's gate) before it was sent: time
    the engine could not have spent on it. ``slot`` names the turn it sampled (group
    key, trajectory, turn), when it was sampled inside a rollout."""

    sent: float
    answered: float
    server: str
    prompt_tokens: int
    max_tokens: int
    sampled_tokens: int
    waited: float = 0.0
    slot: tuple[str | None, int, int] | None = None
    body: dict[str, Any] | None = None
    """The request as sent, when the trace keeps bodies (a replay needs them)."""


@dataclass(frozen=True)
class Occupancy:
    """How full the client kept the engine over one traced run."""

    seconds: float
    """From the first request sent to the last answer read."""
    requests: int
    mean_in_flight: float
    full_share: float
    """Share of the time with ``concurrency`` requests (or more) in flight."""
    idle_share: float
    """Share of the time with no request in flight: the engine had nothing of ours."""
    refill_ms_median: float
    """Median delay from the answer that freed a slot to the send of a request that
    was waiting for one: the client's own latency in handing a slot on."""
    think_ms_median: float = 0.0
    """Median time from a turn's answer to the same episode's next request, less its
    wait for a slot: the env's step and the client's own work between turns (spans
    with a ``slot`` only)."""

    def line(self) -> str:
        return (
            f"{self.requests} requests in {self.seconds:.2f} s, mean in flight "
            f"{self.mean_in_flight:.2f}, full {100 * self.full_share:.0f}%, idle "
            f"{100 * self.idle_share:.1f}%, refill {self.refill_ms_median:.2f} ms, "
            f"between turns {self.think_ms_median:.2f} ms"
        )


@dataclass
class RequestTrace:
    """The spans of every sampling request a policy (or a raw client) sent."""

    keep_bodies: bool = False
    spans: list[RequestSpan] = field(default_factory=list)

    def add(self, span: RequestSpan) -> None:
        if not self.keep_bodies and span.body is not None:
            span = dataclasses.replace(span, body=None)
        self.spans.append(span)

    def add_turn(
        self, body: dict[str, Any], server: str, prompt_tokens: int, sampled_tokens: int, *,
        max_tokens: int, entered: float, sent: float,
    ) -> None:  # fmt: skip
        """A sampling request just answered: ``entered`` when it asked for a slot,
        ``sent`` when it left (:func:`time.perf_counter`), in the rollout turn that
        is running (if any)."""
        slot = current_turn.get()
        self.add(
            RequestSpan(
                sent=sent,
                answered=time.perf_counter(),
                server=server,
                prompt_tokens=prompt_tokens,
                max_tokens=max_tokens,
                sampled_tokens=sampled_tokens,
                waited=sent - entered,
                slot=None if slot is None else (slot.group_key, slot.traj_index, slot.turn),
                body=body,  # dropped unless the trace keeps bodies
            )
        )

    def in_flight(self) -> list[tuple[float, int]]:
        """The requests in flight as a step function: (time since the first send,
        count from then on), one point per send or answer."""
        return in_flight_steps(self.spans)

    def occupancy(self, concurrency: int) -> Occupancy:
        return occupancy(self.spans, concurrency)

    def sparkline(self, width: int = 60, concurrency: int | None = None) -> str:
        return sparkline(self.spans, width, concurrency)


def in_flight_steps(spans: Sequence[RequestSpan]) -> list[tuple[float, int]]:
    """See :meth:`RequestTrace.in_flight`. An answer at the same instant as a send
    is counted first, so a slot handed straight on never reads as two in flight."""
    if not spans:
        return []
    start = min(s.sent for s in spans)
    events = sorted(
        [(s.sent - start, 1) for s in spans] + [(s.answered - start, -1) for s in spans],
        key=lambda event: (event[0], event[1]),
    )
    steps: list[tuple[float, int]] = []
    count = 0
    for at, change in events:
        count += change
        if steps and steps[-1][0] == at:
            steps[-1] = (at, count)
        else:
            steps.append((at, count))
    return steps


def occupancy(spans: Sequence[RequestSpan], concurrency: int) -> Occupancy:
    """See :class:`Occupancy`."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    steps = in_flight_steps(spans)
    if not steps:
        return Occupancy(0.0, 0, 0.0, 0.0, 0.0, 0.0)
    total = steps[-1][0]
    weighted = full = idle = 0.0
    for (at, count), (following, _) in itertools.pairwise(steps):
        length = following - at
        weighted += count * length
        full += length if count >= concurrency else 0.0
        idle += length if count == 0 else 0.0
    share = (lambda part: part / total) if total > 0 else (lambda part: 0.0)
    return Occupancy(
        seconds=total,
        requests=len(spans),
        mean_in_flight=weighted / total if total > 0 else 0.0,
        full_share=share(full),
        idle_share=share(idle),
        refill_ms_median=1000 * _median_refill(spans),
        think_ms_median=1000 * _median_think(spans),
    )


def _median_think(spans: Sequence[RequestSpan]) -> float:
    episodes: dict[tuple[str | None, int], list[RequestSpan]] = {}
    for span in spans:
        if span.slot is not None:
            episodes.setdefault(span.slot[:2], []).append(span)
    gaps = [
        later.sent - later.waited - earlier.answered
        for turns in episodes.values()
        for earlier, later in itertools.pairwise(sorted(turns, key=lambda s: s.slot[2]))
    ]
    return statistics.median(gaps) if gaps else 0.0


def _median_refill(spans: Sequence[RequestSpan]) -> float:
    """For each send that waited for a slot, the time since the latest answer before
    it (the one that freed the slot): how long the client took to hand it on."""
    answers = sorted(s.answered for s in spans)
    gaps = []
    for span in spans:
        if span.waited <= 0:
            continue
        index = bisect.bisect_right(answers, span.sent)
        if index:
            gaps.append(span.sent - answers[index - 1])
    return statistics.median(gaps) if gaps else 0.0


def sparkline(spans: Sequence[RequestSpan], width: int = 60, concurrency: int | None = None) -> str:
    """The mean requests in flight per time bucket, one block character per bucket,
    scaled to ``concurrency`` (default: the most seen in flight)."""
    steps = in_flight_steps(spans)
    if not steps or steps[-1][0] <= 0:
        return ""
    total = steps[-1][0]
    top = concurrency or max(count for _, count in steps) or 1
    bucket = total / width
    means = [0.0] * width
    for (at, count), (following, _) in itertools.pairwise(steps):
        # spread this step's count over the buckets it covers
        first, last = int(at / bucket), min(int(following / bucket), width - 1)
        for index in range(first, last + 1):
            low, high = max(at, index * bucket), min(following, (index + 1) * bucket)
            if high > low:
                means[index] += count * (high - low) / bucket
    scale = len(_BLOCKS) - 1
    return "".join(_BLOCKS[min(scale, round(scale * mean / top))] for mean in means)
