"""Rollout through agentenvs against raw requests to the same vLLM, side by side.

What the environment, the collector and the policy cost on top of the engine:

1. collect guess_number groups through agentenvs (``OpenAICompatPolicy``, at most
   C requests in flight, every group at once), with a seed so every request is
   known afterwards;
2. replay the very same requests raw with httpx: per episode its turns in order
   (a turn's prompt is the stored context), C in flight, the stored seed, and
   exactly the stored number of tokens (``min_tokens = max_tokens``, EOS ignored);
3. overhead = 1 - raw / agentenvs wall time; and, less sensitive to a loaded
   machine, the client CPU share: (agentenvs' process CPU seconds - raw's) over
   agentenvs' wall time, what the env, the collector and the policy spend.

The prefix cache is reset before every run, so neither side inherits the other's
cached prompts, and each concurrency runs both orders (A-B, B-A), keeping the
median of each side. The server is started here from ``.venv-vllm`` on 127.0.0.1.

Run: ``python benchmarks/bench_vllm.py [--groups 8] [--group-size 4] [--max-tokens 64]``.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.rendered_env import Limits
from agentenvs.rollout.collect.collector import collect
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.policies.tiny_model import save_vllm_tiny_model
from agentenvs.rollout.policies.vllm_server import VLLMOptions, start_vllm
from agentenvs.rollout.tokenizer import train_chatml_tokenizer

Episode = list[tuple[list[int], int, int]]
"""One episode's requests: (prompt tokens, tokens sampled, seed) per turn."""


async def reset_cache(url: str) -> None:
    async with httpx.AsyncClient() as client:
        (await client.post(url + "/reset_prefix_cache")).raise_for_status()


async def through_agentenvs(url, tokenizer, builders, concurrency: int, seed: int):
    policy = OpenAICompatPolicy(
        url, tokenizer=tokenizer, seed=seed, concurrency=concurrency, max_tokens=4096
    )
    await reset_cache(url)
    started, cpu = time.perf_counter(), time.process_time()
    result = await collect(builders, policy, concurrency=len(builders), progress=False)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    await policy.aclose()
    if result.failed:
        raise RuntimeError(result.failed[0].error)
    return elapsed, cpu, episodes_of(result.ok)


def episodes_of(records: list[GroupRecord]) -> list[Episode]:
    return [
        [(list(tr.ob), len(tr.ac.tokens), int(tr.logs["policy/seed"])) for tr in traj.transitions]
        for record in records
        for traj in record.group.trajectories
    ]


async def raw_requests(
    url: str, model: str, episodes: list[Episode], concurrency: int
) -> tuple[float, float]:
    slots = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def episode(turns: Episode) -> None:
            for prompt, n, seed in turns:
                body = {
                    "model": model,
                    "prompt": prompt,
                    "max_tokens": n,
                    "min_tokens": n,
                    "ignore_eos": True,
                    "temperature": 1.0,
                    "seed": seed,
                    "logprobs": 1,
                    "return_tokens_as_token_ids": True,
                }
                async with slots:
                    answer = await client.post(url + "/v1/completions", json=body)
                answer.raise_for_status()
                answer.json()  # a client reads what it asked for

        await reset_cache(url)
        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(episode(turns) for turns in episodes))
        return time.perf_counter() - started, time.process_time() - cpu


async def measure(url: str, model: str, args: argparse.Namespace) -> list[dict]:
    tokenizer = train_chatml_tokenizer()
    limits = Limits(max_turns=4, max_tokens_per_turn=args.max_tokens, on_truncated_action="pass")
    config = GuessNumberConfig(tasks=args.groups, limits=limits)
    rows = []
    for concurrency in args.concurrency:
        ours, raw, cpu_ours, cpu_raw, tokens = [], [], [], [], 0
        episodes: list[Episode] = []
        for order in args.orders:
            builders = [
                config.group_builder(i, args.group_size, tokenizer) for i in range(args.groups)
            ]
            if order == "ba" and episodes:  # raw first, replaying the previous run's requests
                wall, cpu = await raw_requests(url, model, episodes, concurrency)
                raw.append(wall)
                cpu_raw.append(cpu)
            wall, cpu, episodes = await through_agentenvs(url, tokenizer, builders, concurrency, 1)
            ours.append(wall)
            cpu_ours.append(cpu)
            if order == "ab" or len(raw) < len(ours):
                wall, cpu = await raw_requests(url, model, episodes, concurrency)
                raw.append(wall)
                cpu_raw.append(cpu)
            tokens = sum(n for ep in episodes for _, n, _ in ep)
        a, r = statistics.median(ours), statistics.median(raw)
        cpu_share = (statistics.median(cpu_ours) - statistics.median(cpu_raw)) / a
        rows.append(
            {
                "concurrency": concurrency,
                "agentenvs_s": a,
                "raw_s": r,
                "overhead": 1 - r / a,
                "client_cpu_share": cpu_share,
                "tokens": tokens,
                "tok_per_s": tokens / a,
            }
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument(
        "--orders", nargs="+", default=["ab", "ba", "ab"], help="per repeat: ab or ba"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_vllm_tiny_model(Path(tmp) / "model", train_chatml_tokenizer())
        options = VLLMOptions(served_model_name="bench-tiny", lora_rank=None)
        with start_vllm(model_dir, Path(tmp) / "vllm.log", options) as server:
            rows = asyncio.run(measure(server.url, server.served_model_name, args))
    print(
        f"\nmachine: {platform.machine()}, {platform.processor() or '?'}, python {platform.python_version()}"
    )
    print(
        f"guess_number, {args.groups} groups x {args.group_size}, {args.max_tokens} tokens/turn cap"
    )
    print(
        "| concurrency | agentenvs s | raw s | wall overhead | client CPU share | tokens | tok/s |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['concurrency']} | {row['agentenvs_s']:.2f} | {row['raw_s']:.2f} | "
            f"{100 * row['overhead']:.1f}% | {100 * row['client_cpu_share']:.1f}% | "
            f"{row['tokens']} | {row['tok_per_s']:.0f} |"
        )


if __name__ == "__main__":
    main()
