"""A local stand-in for a PyTRIO sampling Actor, and a real PyTRIO client wired to it.

PyTRIO's sampling service is remote and needs an account. Everything on the
client side is PyTRIO's own code: ``ServiceRuntime`` (its SDK event loop),
``ActorSamplingRunCoordinator``, ``ActorHTTPClient`` (JWT headers, streaming JSON
read, retries) and ``SamplingClient``. Only two things are replaced:

* the Control plane (login, service session, ``create_sampling_run``), which
  would hand the client an Actor address and a JWT: the fixture gives them
  directly, pointing at 127.0.0.1;
* the Actor itself: this FastAPI app serves ``POST v1/sampling-runs/{run}/sample``
  in the wire format PyTRIO's protocol models define (the request is validated
  with PyTRIO's ``SampleRequest``, the answer built as its ``ActorSampleResponse``),
  sampling with a real tiny transformers model through :class:`HFSampler`.
"""

from __future__ import annotations

import datetime
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from fastapi import FastAPI, HTTPException, Request
from pytrio.protocol.actor.sampling_run.sample import (
    ActorSampleResponse,
    ActorSampleSequence,
    SampleRequest,
    Usage,
)

from agentenvs.rollout.policies.hf import HFSampler


@dataclass
class ActorLog:
    status: int = 200
    """Answer with this HTTP status instead of sampling (e.g. 400)."""
    fail_first: int = 0
    """Answer this many requests with HTTP 503 first (PyTRIO retries those)."""
    requests: list[dict] = field(default_factory=list)
    answers: dict[tuple[int, ...], list[ActorSampleSequence]] = field(default_factory=dict)
    """Prompt tokens -> the sequences sent back for it (group members share prompts)."""
    calls: int = 0


def make_actor_app(sampler: HFSampler, log: ActorLog, run: str = "run-local") -> FastAPI:
    app = FastAPI()
    shared = torch.Generator().manual_seed(0)  # requests without a seed draw from one stream

    @app.post("/v1/sampling-runs/{run_id}/sample")
    def sample(run_id: str, body: dict, request: Request) -> dict:
        log.calls += 1
        if request.headers.get("authorization") != "Bearer local-jwt":
            raise HTTPException(401, "bad token")
        if log.calls <= log.fail_first:
            raise HTTPException(503, "warming up")
        if log.status != 200:
            raise HTTPException(log.status, "prompt rejected")
        parsed = SampleRequest.model_validate(body)  # PyTRIO's own request model
        log.requests.append(body)
        prompt = [t for chunk in parsed.prompt.chunks for t in chunk.tokens]
        params = parsed.sampling_params
        stop = list(params.get("stop") or []) + list(params.get("stop_token_ids") or [])
        seed = params.get("seed")
        generator = shared if seed is None else torch.Generator().manual_seed(int(seed))
        out = sampler.generate(
            prompt,
            stop=stop,
            max_tokens=int(params["max_tokens"]),
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            generator=generator,
        )
        # Like Tinker, the Actor says "stop" for stop sequences and EOS alike.
        sequence = ActorSampleSequence(
            tokens=out.tokens,
            logprobs=out.logprobs or [],
            stop_reason="length" if out.stop_reason == "length" else "stop",
        )
        log.answers.setdefault(tuple(prompt), []).append(sequence)
        return ActorSampleResponse(
            request_id=parsed.request_id,
            sampling_run=run_id,
            sequences=[sequence],
            usage=Usage(input_tokens=len(prompt), output_tokens=len(out.tokens)),
        ).model_dump(mode="json")

    return app


@contextmanager
def pytrio_sampling_client(actor_url: str, *, model_id: str = "tiny-local"):
    """A real ``pytrio.SamplingClient`` whose Actor is ``actor_url`` (see the module doc)."""
    from pytrio import SamplingClient
    from pytrio.config.config import configuration
    from pytrio.model.limits import SamplingLimits
    from pytrio.protocol.control.actor.credentials import ActorConnectionInfo, ActorJWT
    from pytrio.runtime.service import ServiceRuntime

    settings = configuration.model_copy(
        update={
            "retry_initial_delay_seconds": 0.05,
            "sampling_retry_timeout_seconds": 5.0,
            "request_timeout_seconds": 30,
        },
        deep=True,
    )
    runtime = ServiceRuntime(api_key="offline-test", runtime_configuration=settings)
    actor = ActorConnectionInfo(
        actor_cuid="actor-local", endpoint=actor_url, connect_mode="direct", tls_enabled=False
    )
    token = ActorJWT(
        token="local-jwt",
        expires_at=datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1),
    )

    async def no_renewal():
        raise RuntimeError("the local Actor's token does not expire")

    async def make_coordinator():
        # The coordinator binds to the loop it is made on: PyTRIO's SDK loop.
        return runtime.create_actor_sampling_run_coordinator(
            actor, token, no_renewal, sampling_run_cuid="run-local"
        )

    coordinator = runtime.event_loop.run_sync(make_coordinator())
    client = SamplingClient(
        sampling_run_cuid="run-local",
        model_id=model_id,
        coordinator=coordinator,
        limits=SamplingLimits(max_batch_size=None, max_tokens_per_request=None, max_seq_len=None),
        runtime=runtime,
    )
    try:
        yield client
    finally:
        runtime.shutdown()
