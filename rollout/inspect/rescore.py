"""``agentenvs check --rescore MODEL``: the recorded logprobs against a local model's own.

The offline twin of the drift alarm (``weights/drift.py``). A store (or hand-off)
records the sampler's logprob on every sampled token; a teacher-forced forward pass
of the weights that sampled them gives the same numbers within the engine's noise.
A logprob shifted by one position, copied from another sample, or sampled by other
weights than the run claims lands far outside that noise, whatever the data's own
invariants say. The model is loaded once in float32 (the reference); the tolerance
is the measured noise of the *sampler's* dtype (``weights/proof.py``'s ``NOISE``,
times its ``NOISE_FACTOR``), per sample: its RMS over the sampled tokens and its
largest single difference.

Only tokens in the loss mask are compared (an action masked as a parse error keeps
its logprobs but is not trained on, so it is not judged), and only at temperature 1:
a sampler's logprobs at another temperature are of another distribution.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentenvs.rollout.data.samples import TrainingSample
from agentenvs.rollout.inspect.findings import Check, Finding
from agentenvs.rollout.weights.proof import Tolerance

Scorer = Callable[[list[int], int], list[float]]
"""``score(sequence, start)``: log p(sequence[i] | sequence[:i]) for i >= start."""


@dataclass(frozen=True)
class Rescorer:
    score: Scorer
    tolerance: Tolerance
    label: str
    """The model, as the report names it."""


def load_rescorer(model: str, dtype: str = "float32", device: str = "cpu") -> Rescorer:
    """A float32 reference from a local Hugging Face causal LM directory; ``dtype`` is
    the sampler's, which sets the tolerance. ValueError for an unknown dtype."""
    from transformers import AutoModelForCausalLM

    from agentenvs.rollout.weights.probe import torch_reference

    tolerance = Tolerance.for_dtype(dtype)
    loaded = AutoModelForCausalLM.from_pretrained(model).float().to(device).eval()
    return Rescorer(torch_reference(loaded), tolerance, f"{model} (sampler {dtype})")


def check_rescore(
    samples: Sequence[TrainingSample],
    rescorer: Rescorer,
    keys: Sequence[str] = (),
    *,
    temperature: float | None = 1.0,
) -> Finding:
    """Each sample's recorded logprobs on its trained tokens agree with the model's."""
    if temperature is not None and not math.isclose(float(temperature), 1.0):
        return Finding(
            Check.FIXED_TRAJECTORY,
            "skip",
            f"rescore: sampled at temperature {temperature}, so the recorded logprobs are not "
            "the model's own",
        )
    tol = rescorer.tolerance
    compared = 0
    worst = 0.0
    for i, s in enumerate(samples):
        positions = [p for p, m in enumerate(s.loss_mask) if m == 1 and p > 0]
        if not positions or not s.has_logprobs:
            continue
        model = rescorer.score(list(s.tokens), 1)  # model[p - 1] scores token p
        diffs = [abs(s.logprobs[p] - model[p - 1]) for p in positions]
        compared += len(diffs)
        rms = math.sqrt(sum(d * d for d in diffs) / len(diffs))
        top = max(range(len(diffs)), key=diffs.__getitem__)
        worst = max(worst, rms)
        if rms > tol.rms or diffs[top] > tol.max or any(math.isnan(d) for d in diffs):
            p = positions[top]
            key = keys[i] if i < len(keys) else s.group_index
            return Finding(
                Check.FIXED_TRAJECTORY,
                "fail",
                f"rescore by {rescorer.label}: recorded logprob {s.logprobs[p]:.5g} but the model "
                f"gives {model[p - 1]:.5g}; sample rms {rms:.3g} (tolerance {tol.rms:.3g}), "
                f"max {diffs[top]:.3g} (tolerance {tol.max:.3g}): not the logprobs these "
                "weights give these tokens",
                f"group {key} traj {s.traj_index} sample {s.sample_index} token {p}",
            )
    if not compared:
        return Finding(Check.FIXED_TRAJECTORY, "skip", "rescore: no sampled token with a logprob")
    return Finding(
        Check.FIXED_TRAJECTORY,
        "pass",
        f"rescore by {rescorer.label}: {compared} sampled tokens within tolerance "
        f"(worst sample rms {worst:.3g}, tolerance {tol.rms:.3g})",
    )


def recorded_temperature(records: Sequence[Any]) -> float | None:
    """The sampling temperature the records' provenance names (None: not recorded)."""
    for record in records:
        sampling = record.provenance.get("sampling") or {}
        if sampling.get("temperature") is not None:
            return float(sampling["temperature"])
    return None
