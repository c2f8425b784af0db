"""A stand-in for a vLLM / SGLang server, for the OpenAI-compatible policy tests.

An emulation, not either engine: this FastAPI app serves the subset of their wire
formats the policy uses, answered by a tiny transformers model through
:class:`HFSampler`. The real vLLM (CPU build, ``.venv-vllm``) runs in the suite too
(``tests/support/vllm_server.py``); this app is what tests need that a real engine
cannot give on demand (slow, failing, rejecting servers, request counts, several
servers on a 2-core machine). SGLang does not run here (its PyPI install brings
CUDA kernels; its CPU backend is built from source and targets Intel Xeon CPUs with
AMX, which this AMD EPYC VM lacks), so for
``api="sglang"`` this emulation is the only server the policy is tested against;
its ``/generate`` follows the field names of SGLang's native API (``GenerateReqInput``,
``SamplingParams`` and the tokenizer manager's output dict), not a recorded
exchange with a running SGLang:

* ``GET /v1/models`` and ``POST /v1/completions`` (vLLM: ``prompt`` as token ids,
  ``logprobs``, ``return_tokens_as_token_ids`` giving ``"token_id:<id>"`` tokens,
  ``finish_reason`` with ``stop_reason`` null on EOS);
* ``POST /generate`` (SGLang native: ``input_ids``, ``sampling_params``,
  ``output_ids`` and ``meta_info.output_token_logprobs`` as
  ``(logprob, token_id, text)`` triples, ``meta_info.finish_reason``). Simplified:
  a stop always reports the last token id as ``matched`` (SGLang reports the
  matched stop string for a string stop); the text slot of each triple is
  ``None``, as SGLang sends it without ``return_text_in_logprobs``.

It can also be made slow or failing to test timeouts and retries, and counts
requests and the peak number in flight.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import uvicorn
from fastapi import FastAPI, HTTPException

from agentenvs.rollout.policies.hf import HFSampler


@dataclass
class Behaviour:
    delay: float = 0.0
    """Seconds to wait before answering."""
    fail_first: int = 0
    """Answer this many requests with HTTP 503 first."""
    reject: bool = False
    """Answer with HTTP 400 (a request the server does not accept)."""
    ignore_token_ids: bool = False
    """Act like a server without ``return_tokens_as_token_ids``: tokens come back as text."""
    bodies: list = field(default_factory=list)
    requests: int = 0
    in_flight: int = 0
    peak: int = 0
    model_lookups: int = 0
    """``GET /v1/models`` requests answered."""
    peers: set = field(default_factory=set)
    """Client (host, port) pairs seen: one per connection the client opened."""


def make_app(sampler: HFSampler, behaviour: Behaviour, model_name: str = "tiny") -> FastAPI:
    app = FastAPI()

    @app.middleware("http")
    async def note_peer(request, call_next):
        if request.client is not None:
            behaviour.peers.add((request.client.host, request.client.port))
        return await call_next(request)

    async def admit(body: dict) -> None:
        behaviour.requests += 1
        behaviour.bodies.append(body)
        if behaviour.reject:
            raise HTTPException(400, "prompt is too long for this model")
        if behaviour.requests <= behaviour.fail_first:
            raise HTTPException(503, "engine is warming up")

    def sample(prompt, stop, stop_ids, max_tokens, temperature, top_p, seed):
        generator = torch.Generator()
        generator.manual_seed(seed if seed is not None else 0)
        return sampler.generate(
            prompt,
            stop=[*stop, *stop_ids],
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            generator=generator,
        )

    async def timed(call):
        behaviour.in_flight += 1
        behaviour.peak = max(behaviour.peak, behaviour.in_flight)
        try:
            await asyncio.sleep(behaviour.delay)
            return await asyncio.to_thread(call)
        finally:
            behaviour.in_flight -= 1

    @app.get("/v1/models")
    async def models() -> dict:
        behaviour.model_lookups += 1
        return {"object": "list", "data": [{"id": model_name, "object": "model"}]}

    @app.post("/v1/completions")
    async def completions(body: dict) -> dict:
        await admit(body)
        if body.get("model") != model_name:
            raise HTTPException(404, f"model {body.get('model')!r} does not exist")
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else stop
        stop_ids = body.get("stop_token_ids") or []
        out = await timed(
            lambda: sample(
                body["prompt"],
                stop,
                stop_ids,
                body.get("max_tokens", 16),
                body.get("temperature", 1.0),
                body.get("top_p", 1.0),
                body.get("seed"),
            )
        )
        text = sampler.tokenizer.decode(out.tokens, skip_special_tokens=False)
        if out.stop_reason == "length":
            finish, matched = "length", None
        elif out.stop_reason == "eos":
            finish, matched = "stop", None
        else:
            finish = "stop"
            matched = next((s for s in stop if s in text), out.tokens[-1])
        as_ids = body.get("return_tokens_as_token_ids") and not behaviour.ignore_token_ids
        names = [f"token_id:{t}" if as_ids else sampler.tokenizer.decode([t]) for t in out.tokens]
        logprobs = None
        if body.get("logprobs") is not None:
            logprobs = {
                "tokens": names,
                "token_logprobs": out.logprobs,
                "top_logprobs": [{n: lp} for n, lp in zip(names, out.logprobs, strict=True)],
                "text_offset": [0] * len(names),
            }
        return {
            "id": f"cmpl-{behaviour.requests}",
            "object": "text_completion",
            "model": model_name,
            "choices": [
                {
                    "index": 0,
                    "text": text,
                    "logprobs": logprobs,
                    "finish_reason": finish,
                    "stop_reason": matched,
                }
            ],
            "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(out.tokens)},
        }

    @app.post("/generate")
    async def generate(body: dict) -> dict:
        await admit(body)
        params = body.get("sampling_params") or {}
        stop = params.get("stop") or []
        stop = [stop] if isinstance(stop, str) else stop
        out = await timed(
            lambda: sample(
                body["input_ids"],
                stop,
                params.get("stop_token_ids") or [],
                params.get("max_new_tokens", 128),
                params.get("temperature", 1.0),
                params.get("top_p", 1.0),
                params.get("sampling_seed"),
            )
        )
        text = sampler.tokenizer.decode(out.tokens, skip_special_tokens=False)
        if out.stop_reason == "length":
            finish = {"type": "length", "length": len(out.tokens)}
        else:
            finish = {"type": "stop", "matched": out.tokens[-1]}
        meta = {
            "finish_reason": finish,
            "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": len(out.tokens),
        }
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = [
                [lp, t, None] for lp, t in zip(out.logprobs, out.tokens, strict=True)
            ]
        return {"text": text, "output_ids": out.tokens, "meta_info": meta}

    return app


@contextmanager
def serve(app: FastAPI):
    """Run ``app`` on 127.0.0.1 at a free port in a background thread; yields the URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the stand-in server did not start")
            threading.Event().wait(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def free_port() -> int:
    """A port nothing listens on (bound then released): connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
