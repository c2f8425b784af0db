"""Retrieval server throughput with concurrent clients, batched vs unbatched.

Builds a bm25 index over a generated corpus, starts ``agentenvs retriever serve`` in a
subprocess on 127.0.0.1 twice (``--batch-size 1``, then batched), and drives each from
this process with many concurrent HTTP clients, as many envs would. Reports
queries/s and p50/p99 latency per request, and the batched/unbatched ratio measured
in the same run. Server and clients share the machine's cores.

    python benchmarks/bench_retrieval_server.py --passages 100000 --clients 64 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

WORDS_SEED = 7


def make_corpus(path: Path, n: int, seed: int = WORDS_SEED) -> list[str]:
    """A generated encyclopedia-like corpus: Zipf-distributed words, unique titles."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mer", "vin", "tas", "ro", "el", "dun", "is", "ar", "pe", "quo", "sil"]
    vocab = sorted({"".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(60000)})
    cum: list[float] = []
    total = 0.0
    for rank in range(len(vocab)):
        total += 1 / (rank + 1)
        cum.append(total)
    with path.open("w") as out:
        for i in range(n):
            title = f"{rng.choice(vocab).capitalize()} {i}"
            words = rng.choices(vocab, cum_weights=cum, k=rng.randint(40, 110))
            out.write(
                json.dumps({"id": str(i), "contents": f'"{title}"\n{" ".join(words)}.'}) + "\n"
            )
    queries = [
        " ".join(rng.choices(vocab, cum_weights=cum, k=rng.randint(2, 6))) for _ in range(4096)
    ]
    return queries


def start(index: Path, port: int, batch_size: int) -> subprocess.Popen:
    args = [
        sys.executable, "-m", "agentenvs.envs.search_r1.cli", "serve", "--index", str(index),
        "--port", str(port), "--batch-size", str(batch_size),
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start")


async def drive(url: str, queries: list[str], clients: int, per_request: int, seconds: float):
    """``clients`` concurrent HTTP clients, each posting ``per_request`` queries at a time.

    The load generator is aiohttp when installed (its client costs less CPU than
    httpx's at 64 connections, and it shares the cores with the server), else httpx.
    """
    latencies: list[float] = []
    done = 0
    stop_at = time.perf_counter() + seconds
    try:
        import aiohttp
    except ImportError:
        aiohttp = None

    async def run(post) -> float:
        nonlocal done

        async def worker(seed: int) -> None:
            nonlocal done
            rng = random.Random(seed)
            while time.perf_counter() < stop_at:
                body = {
                    "queries": rng.sample(queries, per_request),
                    "topk": 3,
                    "return_scores": True,
                }
                t0 = time.perf_counter()
                await post(body)
                latencies.append(time.perf_counter() - t0)
                done += per_request

        start_t = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(clients)))
        return time.perf_counter() - start_t

    if aiohttp is not None:
        connector = aiohttp.TCPConnector(limit=clients)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def post(body):
                async with session.post(url, json=body) as response:
                    response.raise_for_status()
                    await response.read()

            elapsed = await run(post)
    else:
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:

            async def post(body):
                (await client.post(url, json=body)).raise_for_status()

            elapsed = await run(post)
    return _summary(done, elapsed, latencies)


def _summary(done: int, elapsed: float, latencies: list[float]) -> dict[str, float]:
    latencies.sort()
    return {
        "queries_per_s": done / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
    }


async def drive_envs(url: str, queries: list[str], envs: int, seconds: float):
    """The env path: ``envs`` concurrent callers of the ``http`` retriever, one query each;
    the client micro-batches them into shared requests."""
    from agentenvs.envs.search_r1.retrievers import RetrieverConfig, make_retriever

    retriever = make_retriever(RetrieverConfig(kind="http", url=url), cached=False)
    latencies: list[float] = []
    done = 0
    stop_at = time.perf_counter() + seconds

    async def env(seed: int) -> None:
        nonlocal done
        rng = random.Random(seed)
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            await retriever.search([rng.choice(queries)], 3)
            latencies.append(time.perf_counter() - t0)
            done += 1

    start_t = time.perf_counter()
    try:
        await asyncio.gather(*(env(i) for i in range(envs)))
    finally:
        await retriever.close()
    return _summary(done, time.perf_counter() - start_t, latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--port", type=int, default=8791)
    parser.add_argument("--workdir", help="keep the generated corpus and index here for reruns")
    args = parser.parse_args()

    from agentenvs.envs.search_r1.retrievers import RetrieverConfig, build_index

    with tempfile.TemporaryDirectory() as scratch:
        work = Path(args.workdir or scratch)
        work.mkdir(parents=True, exist_ok=True)
        corpus, index, qfile = work / "corpus.jsonl", work / "index", work / "queries.json"
        t0 = time.perf_counter()
        if not qfile.is_file():  # --workdir keeps the corpus and index between runs
            qfile.write_text(json.dumps(make_corpus(corpus, args.passages)))
        queries = json.loads(qfile.read_text())
        t1 = time.perf_counter()
        if not (index / "params.index.json").is_file():
            build_index(RetrieverConfig(corpus=str(corpus)), index)
        t2 = time.perf_counter()
        n = sum(1 for _ in corpus.open())
        print(f"corpus: {n} passages ready in {t1 - t0:.1f}s, index in {t2 - t1:.1f}s")
        url = f"http://127.0.0.1:{args.port}/retrieve"
        rows = {}
        scenarios = [
            (
                "unbatched server, 1 query/request",
                1,
                lambda: drive(url, queries, args.clients, 1, args.seconds),
            ),
            (
                "batched server, 1 query/request",
                64,
                lambda: drive(url, queries, args.clients, 1, args.seconds),
            ),
            (
                "batched server, 8 queries/request",
                64,
                lambda: drive(url, queries, args.clients, 8, args.seconds),
            ),
            (  # Search-R1's trainer posts every active rollout's query in one request
                "batched server, 64 queries/request",
                64,
                lambda: drive(url, queries, 4, 64, args.seconds),
            ),
            (
                "http retriever, 1 query/env",
                64,
                lambda: drive_envs(url, queries, args.clients, args.seconds),
            ),
        ]
        for label, batch_size, run in scenarios:
            proc = start(index, args.port, batch_size)
            try:
                asyncio.run(drive(url, queries, 8, 1, 1.0))  # warm-up
                rows[label] = asyncio.run(run())
            finally:
                proc.kill()
                proc.wait()
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"{args.clients} concurrent clients, {args.seconds:g}s each, top-3")
    print(f"{'setting':36} {'queries/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for label, row in rows.items():
        print(f"{label:36} {row['queries_per_s']:10.0f} {row['p50_ms']:8.1f} {row['p99_ms']:8.1f}")
    base = rows["unbatched server, 1 query/request"]["queries_per_s"]
    for label in list(rows)[1:]:
        print(f"ratio {label} / unbatched: {rows[label]['queries_per_s'] / base:.2f}x")


if __name__ == "__main__":
    main()
