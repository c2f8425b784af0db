"""The statistic behind "verified": new weights told from old, at the sizes real updates have.

The magnitudes here are the measured ones (``benchmarks/bench_probe_power.py``):
engine noise per dtype from :data:`NOISE`, updates from one AdamW step at lr 1e-6
to 1e-4. The real-engine half is ``test_vllm_weights_realistic.py``.
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
    Tolerance,
    separate,
)

SCORED = 1276  # the default probe's teacher-forced positions


def _scores(seed: int, n: int = SCORED) -> list[float]:
    rng = random.Random(seed)
    return [-rng.uniform(0.0, 40.0) for _ in range(n)]


def _moved(scores: list[float], size: float, seed: int) -> list[float]:
    """``scores`` moved by an update of RMS about ``size`` (Gaussian per position)."""
    rng = random.Random(seed)
    return [s + rng.gauss(0.0, size) for s in scores]


@pytest.mark.parametrize("dtype", sorted(NOISE))
@pytest.mark.parametrize("update", [3e-4, 3e-3, 3e-2, 0.3])  # LoRA lr 1e-6 .. full lr 1e-4
def test_a_server_that_kept_the_old_weights_is_never_verified(dtype, update):
    tolerance = Tolerance.for_dtype(dtype)
    noise = NOISE[dtype].rms
    for seed in range(20):
        old = _scores(seed)
        new = _moved(old, update, seed + 100)
        kept = _moved(old, noise, seed + 200)  # the server after a load that changed nothing
        assert separate(kept, old, new, tolerance).status != "verified"
        served = _moved(new, noise, seed + 300)  # a server that did load the new weights
        right = separate(served, old, new, tolerance)
        assert right.status in ("verified", "indistinguishable")
        # Verified exactly when the update moved the probe by the margin.
        assert (right.status == "verified") == (right.power >= MARGIN)


def test_at_fp32_a_lora_step_at_lr_1e_6_is_told_apart_and_in_bf16_it_is_not():
    """The issue's case: the old rule (max |diff| <= 1e-3) passed a kept-old server."""
    old = _scores(1)
    new = _moved(old, 3.1e-4, 2)  # LoRA r8, lr 1e-6, measured on the suite's model
    kept = _moved(old, NOISE["float32"].rms, 3)
    # The old rule compared 8 continuation tokens: within 1e-3, "verified".
    assert max(abs(a - b) for a, b in zip(kept[:8], new[:8], strict=True)) <= 1e-3
    fp32 = separate(kept, old, new, Tolerance.for_dtype("float32"))
    assert fp32.status == "mismatch"
    served = _moved(new, NOISE["float32"].rms, 4)
    assert separate(served, old, new, Tolerance.for_dtype("float32")).status == "verified"
    bf16 = separate(served, old, new, Tolerance.for_dtype("bfloat16"))
    assert bf16.status == "indistinguishable" and bf16.power < 1


def test_tolerances_come_from_the_measured_noise():
    for dtype, noise in NOISE.items():
        tolerance = Tolerance.for_dtype(dtype)
        assert tolerance.rms == pytest.approx(noise.rms * NOISE_FACTOR)
        assert TOLERANCE[dtype] == tolerance.max == pytest.approx(noise.max * NOISE_FACTOR)
        assert noise.source
    with pytest.raises(ValueError, match="no measured noise"):
        Tolerance.for_dtype("int4")


def test_a_server_off_by_more_than_the_noise_is_a_mismatch_even_on_one_token():
    old = _scores(5)
    new = _moved(old, 0.02, 6)
    after = list(new)
    after[17] += 3 * TOLERANCE["float32"]  # one position wrong, the RMS barely moves
    result = separate(after, old, new, Tolerance.for_dtype("float32"))
    assert result.to_new < Tolerance.for_dtype("float32").rms and result.status == "mismatch"
    with pytest.raises(ValueError, match="scored positions differ"):
        separate(after[:-1], old, new, Tolerance.for_dtype("float32"))


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
