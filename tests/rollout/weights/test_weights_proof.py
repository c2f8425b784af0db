"""The statistic behind "verified": the new weights, and none of the others, at real update sizes.

The magnitudes here are the measured ones (``benchmarks/bench_probe_power.py``):
engine noise per dtype from :data:`NOISE`, updates from one AdamW step at lr 1e-6
to 1e-4. The real-engine half is ``test_vllm_weights_realistic.py`` and
``test_vllm_weights_candidates.py``.
"""

from __future__ import annotations

import random

import pytest

from agentenvs.rollout.weights.instances import start_time
from agentenvs.rollout.weights.probe import (
    TOLERANCE,
    Probe,
    VerificationError,
    _prompt_logprobs,
)
from agentenvs.rollout.weights.proof import (
    MARGIN,
    MIN_SCORED_TOKENS,
    NOISE,
    NOISE_FACTOR,
    REPEAT,
    Candidate,
    Tolerance,
    differs,
    rms,
    separate,
)

SCORED = 1276  # the default probe's teacher-forced positions
FP32, BF16 = Tolerance.for_dtype("float32"), Tolerance.for_dtype("bfloat16")


def _scores(seed: int, n: int = SCORED) -> list[float]:
    rng = random.Random(seed)
    return [-rng.uniform(0.0, 40.0) for _ in range(n)]


def _moved(scores: list[float], size: float, seed: int) -> list[float]:
    """``scores`` moved by an update of RMS about ``size`` (Gaussian per position)."""
    rng = random.Random(seed)
    return [s + rng.gauss(0.0, size) for s in scores]


def _before(scores: list[float]) -> list[Candidate]:
    return [Candidate("the weights served before the load", tuple(scores))]


@pytest.mark.parametrize("dtype", sorted(NOISE))
@pytest.mark.parametrize("update", [3e-4, 3e-3, 3e-2, 0.3])  # LoRA lr 1e-6 .. full lr 1e-4
def test_a_server_that_kept_the_old_weights_is_never_verified(dtype, update):
    """The engine's error against the trainer is the dtype's noise, drawn afresh for
    each set of weights (measured in bf16: the error at nearby weights is not the
    same error); on the same weights the engine answers as before."""
    tolerance = Tolerance.for_dtype(dtype)
    noise = NOISE[dtype].rms
    for seed in range(20):
        old = _scores(seed)
        new = _moved(old, update, seed + 100)
        before = _moved(old, noise, seed + 200)  # the server on the old weights
        kept = list(before)  # a load that changed nothing: the same answers
        assert separate(kept, new, _before(before), tolerance).status != "verified"
        served = _moved(new, noise, seed + 300)  # a server that did load the new weights
        right = separate(served, new, _before(before), tolerance)
        assert right.status == "verified" and right.power >= MARGIN


def test_verified_means_the_server_is_none_of_the_other_candidates():
    """Version 1's adapter served under version 2's name, after an adapter far away:
    at bf16's agreement tolerance it agrees with version 2, and the old rule (distance
    from the previous weights alone) called it verified."""
    base = _scores(7)
    far = _moved(base, 0.3, 8)  # the previous push, far from the others
    v1 = _moved(base, 3e-4, 9)  # two realistic steps (LoRA r8, lr 1e-6)
    v2 = _moved(v1, 3e-4, 10)
    served = list(v1)  # the server answers as it did when v1 was proven
    only_previous = separate(served, v2, _before(far), BF16)
    assert only_previous.status == "verified"  # the hole
    candidates = [*_before(far), Candidate("v1", tuple(v1)), Candidate("base", tuple(base))]
    result = separate(served, v2, candidates, BF16)
    assert result.status == "indistinguishable" and result.nearest.label == "v1"
    assert "nearest other candidate v1" in result.describe()
    # The same server is a plain mismatch at fp32, where the agreement is tight.
    assert separate(served, v2, candidates, FP32).status == "mismatch"
    # Serving version 2 itself: apart from every candidate, verified in both dtypes.
    for tolerance in (BF16, FP32):
        assert separate(_moved(v2, 5e-6, 11), v2, candidates, tolerance).status == "verified"


def test_in_bf16_a_realistic_update_is_told_apart_by_the_server_against_itself():
    """Separation is the server's answers against its own under the other weights,
    in units of its repeat noise, not of bf16's error against the trainer: a LoRA
    step at lr 1e-6 (probe update 3.1e-4) is verified with bf16's agreement tolerance,
    emulated (the server's answers fp32, as vLLM-CPU's here) and with every answer
    carrying its own bf16 error (as a bf16 engine's)."""
    old = _scores(1)
    new = _moved(old, 3.1e-4, 2)
    emulated = separate(_moved(new, NOISE["float32"].rms, 4), new, _before(old), BF16)
    assert emulated.status == "verified" and emulated.power >= MARGIN
    noisy_before = _moved(old, NOISE["bfloat16"].rms, 5)
    real = separate(_moved(new, NOISE["bfloat16"].rms, 6), new, _before(noisy_before), BF16)
    assert real.status == "verified"
    kept = separate(noisy_before, new, _before(noisy_before), BF16)
    assert kept.status == "indistinguishable" and kept.power == 0.0
    # The old rule, |new - before| against bf16's agreement tolerance: power 0.0005.
    assert rms(new, old) / BF16.rms < 1e-3
    # A server whose answers move on the same weights: its unit widens with them.
    wide = BF16.with_observed_repeat(1e-4)
    assert wide.repeat == pytest.approx(8e-4) and BF16.with_observed_repeat(0.0) == BF16
    assert separate(_moved(new, 5e-6, 4), new, _before(old), wide).status == "indistinguishable"
    # Nothing to tell the weights from is not a proof.
    assert separate(new, new, [], BF16).status == "indistinguishable"


def test_tolerances_come_from_the_measured_noise():
    for dtype, noise in NOISE.items():
        tolerance = Tolerance.for_dtype(dtype)
        assert tolerance.rms == pytest.approx(noise.rms * NOISE_FACTOR)
        assert TOLERANCE[dtype] == tolerance.max == pytest.approx(noise.max * NOISE_FACTOR)
        assert tolerance.repeat == pytest.approx(REPEAT.rms * NOISE_FACTOR)
        assert noise.source
    with pytest.raises(ValueError, match="no measured noise"):
        Tolerance.for_dtype("int4")


def test_a_server_off_by_more_than_the_noise_is_a_mismatch_even_on_one_token():
    old = _scores(5)
    new = _moved(old, 0.02, 6)
    after = list(new)
    after[17] += 3 * TOLERANCE["float32"]  # one position wrong, the RMS barely moves
    result = separate(after, new, _before(old), FP32)
    assert result.to_new < FP32.rms and result.status == "mismatch"
    with pytest.raises(ValueError, match="scored positions differ"):
        separate(after[:-1], new, _before(old), FP32)
    with pytest.raises(ValueError, match="scored positions differ"):
        separate(after, new, _before(old[:-1]), FP32)


def test_a_reprobe_tells_the_same_weights_by_the_repeat_tolerance():
    proven = _scores(3)
    assert differs(list(proven), proven, BF16) is None
    base = _moved(proven, 3e-4, 4)  # a restarted server, a realistic step away
    assert "repeat tolerance" in (differs(base, proven, BF16) or "")
    assert "scored tokens" in (differs(base[:-1], proven, BF16) or "")


def test_probes_score_enough_tokens():
    probe = Probe.default(500)
    assert probe.scored_tokens == 4 * 319 >= MIN_SCORED_TOKENS
    assert len(set(probe.sequences)) == 4 and list(probe.sequences[0]) == probe.prompt
    assert all(16 <= t < 500 for seq in probe.sequences for t in seq)
    with pytest.raises(ValueError, match="at least 128"):
        Probe(prompt=list(range(20, 60)))
    prompts = [list(range(30, 30 + n)) for n in (90, 70, 1)]
    own = Probe.from_prompts(prompts)
    assert own.sequences == (tuple(prompts[0]), tuple(prompts[1]))  # the 1-token one scores nothing
    assert own.prompt == prompts[0] and own.scored_tokens == 89 + 69
    with pytest.raises(ValueError, match="at least 128"):
        Probe.from_prompts([list(range(30, 60))])


def test_prompt_logprobs_are_read_from_vllm_answers():
    sequence = [5, 9, 7]
    answer = {
        "choices": [
            {
                "prompt_logprobs": [
                    None,
                    {"9": {"logprob": -1.5, "rank": 3}, "4": {"logprob": -0.2, "rank": 1}},
                    {"token_id:7": {"logprob": -2.25, "rank": 9}},
                ]
            }
        ]
    }
    assert _prompt_logprobs(answer, sequence) == [-1.5, -2.25]
    for broken in (
        {"choices": [{"prompt_logprobs": None}]},
        {"choices": [{"prompt_logprobs": [None, {"8": {"logprob": -1.0}}, {"7": {"logprob": 0}}]}]},
        {"choices": [{"prompt_logprobs": [None, {"9": {"logprob": -1.0}}]}]},
        {"choices": []},
    ):
        with pytest.raises(VerificationError, match="no prompt logprobs"):
            _prompt_logprobs(broken, sequence)


def test_a_server_instance_is_its_start_time():
    page = (
        "# HELP process_start_time_seconds Start time of the process\n"
        "# TYPE process_start_time_seconds gauge\n"
        "process_start_time_seconds 1.79617297749e+09\n"
        "process_cpu_seconds_total 12.5\n"
    )
    assert start_time(page) == "1.79617297749e+09"
    assert start_time("vllm:num_requests_running 0\n") is None
