"""Rollout through agentenvs against raw requests to the same vLLM, side by side.

Three sides, each run with at most C requests in flight, the prefix cache reset first:

* **agentenvs**: collect guess_number groups through ``OpenAICompatPolicy`` (every group
  at once), seeded, so every request is known afterwards (the policy's trace keeps the
  bodies it sent);
* **raw, same work**: the very bodies agentenvs sent, replayed with httpx, each
  episode's turns in order; the tokens that come back must equal the stored ones (they
  are counted: a mismatch means the two sides did not do the same work);
* **raw, same outcome**: the leanest request that yields the same tokens: the stored
  seed, ``min_tokens = max_tokens`` = the stored length, EOS ignored, no stop condition.

Both raw sides and agentenvs record a :class:`RequestTrace` (requests in flight over
time) and the engine's own counters around each run (:mod:`..vllm_metrics`: engine
steps and tokens per step, queue, prefill and decode time per request). Overhead is
``1 - raw / agentenvs`` wall time, paired within each round (its median over rounds,
and its range); the client CPU share is agentenvs' process CPU
seconds minus the same-work replay's, over agentenvs' wall time. Each concurrency runs
``--repeats`` rounds with the three sides in rotated order; the median and the spread
(min-max) of each side are printed with the load average.

Run: ``python benchmarks/bench_vllm.py [--groups 8] [--group-size 4] [--max-tokens 64]
[--concurrency 1 4 16 32] [--repeats 3] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.rendered_env import Limits
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.policies.request_trace import RequestSpan, RequestTrace
from agentenvs.rollout.policies.tiny_model import save_vllm_tiny_model
from agentenvs.rollout.policies.vllm_cpus import ServerCpus
from agentenvs.rollout.policies.vllm_metrics import engine_work, read_vllm_metrics
from agentenvs.rollout.policies.vllm_server import VLLMOptions, server_cpus, start_vllm
from agentenvs.rollout.tokenizer import train_chatml_tokenizer

SIDES = ("agentenvs", "same_work", "same_outcome")


@dataclass(frozen=True)
class Turn:
    body: dict
    """What agentenvs sent for this turn."""
    tokens: list[int]
    """What it got back."""


@dataclass
class Run:
    side: str
    wall: float
    cpu: float
    occupancy: str
    engine: str
    sparkline: str
    mismatched_turns: int = 0


@dataclass
class Row:
    concurrency: int
    load_before: float
    load_after: float = 0.0
    runs: dict[str, list[Run]] = field(default_factory=lambda: defaultdict(list))

    def median(self, side: str) -> float:
        return statistics.median(r.wall for r in self.runs[side])

    def spread(self, side: str) -> str:
        walls = [r.wall for r in self.runs[side]]
        return f"{min(walls):.2f}-{max(walls):.2f}"

    def paired(self, raw_side: str) -> list[float]:
        """Each round's ``1 - raw / agentenvs``: the round's runs ran back to back, so a
        machine that slows down between rounds slows both."""
        return [
            1 - raw.wall / ours.wall
            for ours, raw in zip(self.runs["agentenvs"], self.runs[raw_side], strict=True)
        ]

    def overhead(self, raw_side: str) -> float:
        return statistics.median(self.paired(raw_side))

    def overhead_spread(self, raw_side: str) -> str:
        values = self.paired(raw_side)
        return f"{100 * min(values):.1f}..{100 * max(values):.1f}"

    def cpu_share(self) -> float:
        ours = statistics.median(r.cpu for r in self.runs["agentenvs"])
        raw = statistics.median(r.cpu for r in self.runs["same_work"])
        return (ours - raw) / self.median("agentenvs")


async def reset_cache(client: httpx.AsyncClient, url: str) -> None:
    (await client.post(url + "/reset_prefix_cache")).raise_for_status()


async def timed_run(side, url, concurrency, work) -> tuple[Run, object]:
    """Reset the cache, snapshot the engine, run ``work(trace)``, snapshot again."""
    trace = RequestTrace(keep_bodies=side == "agentenvs")
    async with httpx.AsyncClient(timeout=60) as admin:
        await reset_cache(admin, url)
        before = await read_vllm_metrics(url, admin)
        started, cpu = time.perf_counter(), time.process_time()
        result = await work(trace)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        after = await read_vllm_metrics(url, admin)
    run = Run(
        side=side,
        wall=wall,
        cpu=cpu,
        occupancy=trace.occupancy(concurrency).line(),
        engine=engine_work(before, after, wall).line(),
        sparkline=trace.sparkline(60, concurrency),
    )
    return run, (result, trace)


async def through_agentenvs(url, tokenizer, config, args, concurrency, trace):
    builders = [config.group_builder(i, args.group_size, tokenizer) for i in range(args.groups)]
    policy = OpenAICompatPolicy(
        url, tokenizer=tokenizer, seed=1, concurrency=concurrency, trace=trace
    )
    try:
        result = await collect(
            builders, policy, CollectOptions(concurrency=len(builders), progress=False)
        )
    finally:
        await policy.aclose()
    if result.failed:
        raise RuntimeError(result.failed[0].error)
    return episodes_of(trace.spans, result.ok)


def episodes_of(spans: list[RequestSpan], records) -> list[list[Turn]]:
    """Each episode's turns in order: the body sent (from the trace, by turn slot) and
    the tokens stored for it."""
    bodies = {span.slot: span.body for span in spans}
    episodes = []
    for record in records:
        for index, traj in enumerate(record.group.trajectories):
            episodes.append(
                [
                    Turn(bodies[(record.key, index, turn)], list(tr.ac.tokens))
                    for turn, tr in enumerate(traj.transitions)
                ]
            )
    return episodes


def lean_body(turn: Turn) -> dict:
    """Same prompt, seed and length as ``turn``, nothing else the engine must do."""
    sent = turn.body
    n = len(turn.tokens)
    return {
        "model": sent["model"],
        "prompt": sent["prompt"],
        "max_tokens": n,
        "min_tokens": n,
        "ignore_eos": True,
        "temperature": sent["temperature"],
        "seed": sent["seed"],
        "logprobs": sent["logprobs"],
        "return_tokens_as_token_ids": True,
    }


async def raw_requests(url, episodes, concurrency, trace, *, lean: bool) -> int:
    """Replay ``episodes`` (turns in order, ``concurrency`` in flight); returns how many
    turns came back with other tokens than agentenvs got."""
    slots = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    mismatched = 0

    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def episode(index: int, turns: list[Turn]) -> None:
            nonlocal mismatched
            for number, turn in enumerate(turns):
                body = lean_body(turn) if lean else turn.body
                entered = time.perf_counter()
                async with slots:
                    sent = time.perf_counter()
                    answer = await client.post(url + "/v1/completions", json=body)
                    answer.raise_for_status()
                    choice = answer.json()["choices"][0]
                    trace.add(
                        RequestSpan(
                            sent=sent,
                            answered=time.perf_counter(),
                            server=url,
                            prompt_tokens=len(body["prompt"]),
                            max_tokens=body["max_tokens"],
                            sampled_tokens=len(choice["logprobs"]["tokens"]),
                            waited=sent - entered,
                            slot=(None, index, number),
                        )
                    )
                got = [int(t.split(":", 1)[1]) for t in choice["logprobs"]["tokens"]]
                mismatched += got != turn.tokens

        await asyncio.gather(*(episode(i, turns) for i, turns in enumerate(episodes)))
    return mismatched


async def measure(url: str, args: argparse.Namespace) -> list[Row]:
    tokenizer = train_chatml_tokenizer()
    limits = Limits(max_turns=4, max_tokens_per_turn=args.max_tokens, on_truncated_action="pass")
    config = GuessNumberConfig(tasks=args.groups, limits=limits)

    async def ours(concurrency):
        return await timed_run(
            "agentenvs",
            url,
            concurrency,
            lambda trace: through_agentenvs(url, tokenizer, config, args, concurrency, trace),
        )

    # A warm-up collection: the first replays need its bodies, and the server its first steps.
    _, (episodes, _) = await ours(max(args.concurrency))
    rows = []
    for concurrency in args.concurrency:
        row = Row(concurrency, os.getloadavg()[0])
        for repeat in range(args.repeats):
            shift = repeat % len(SIDES)
            for side in SIDES[shift:] + SIDES[:shift]:
                if side == "agentenvs":
                    run, (episodes, _) = await ours(concurrency)
                else:
                    replay = functools.partial(
                        raw_requests, url, episodes, concurrency, lean=side == "same_outcome"
                    )
                    run, (mismatched, _) = await timed_run(side, url, concurrency, replay)
                    run.mismatched_turns = mismatched
                row.runs[side].append(run)
        row.load_after = os.getloadavg()[0]
        rows.append(row)
        report_row(row)
    return rows


def report_row(row: Row) -> None:
    print(
        f"\n## concurrency {row.concurrency} (load {row.load_before:.2f} -> {row.load_after:.2f})",
        flush=True,
    )
    for side in SIDES:
        runs = row.runs[side]
        last = runs[-1]
        mismatched = sum(r.mismatched_turns for r in runs)
        print(
            f"{side:>12}: median {row.median(side):.2f} s ({row.spread(side)}), "
            f"cpu {statistics.median(r.cpu for r in runs):.2f} s"
            + (f", turns with other tokens {mismatched}" if side == "same_work" else "")
        )
        print(f"{'':>14}client: {last.occupancy}")
        print(f"{'':>14}engine: {last.engine}")
        print(f"{'':>14}in flight |{last.sparkline}|")
    print(
        f"overhead vs same work {100 * row.overhead('same_work'):.1f}% "
        f"({row.overhead_spread('same_work')}), "
        f"vs same outcome {100 * row.overhead('same_outcome'):.1f}% "
        f"({row.overhead_spread('same_outcome')}), "
        f"client CPU share {100 * row.cpu_share():.1f}%",
        flush=True,
    )


def pin_client(placement: ServerCpus) -> str:
    """Keep this process (both clients) off the engine's CPUs when any are left, beside
    the API server: the engine of an RL run has a device of its own, and what is
    measured here is the client's cost, not cycles the client takes from the engine."""
    allowed = os.sched_getaffinity(0)
    left = allowed - set(placement.engine or ())
    if placement.engine and left:
        os.sched_setaffinity(0, left)
    return (
        f"engine on CPUs {placement.engine or 'any'}, API server on "
        f"{placement.frontend or placement.engine or 'any'}, clients on "
        f"{sorted(os.sched_getaffinity(0))}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    parser.add_argument(
        "--server-arg", action="append", default=[], help="extra vLLM argument (repeatable)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_vllm_tiny_model(Path(tmp) / "model", train_chatml_tokenizer())
        options = VLLMOptions(
            served_model_name="bench-tiny", lora_rank=None, extra_args=args.server_arg
        )
        with start_vllm(model_dir, Path(tmp) / "vllm.log", options) as server:
            placement = pin_client(server_cpus(options))
            rows = asyncio.run(measure(server.url, args))
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, python "
        f"{platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M')}; {placement}"
    )
    print(
        f"guess_number, {args.groups} groups x {args.group_size}, {args.max_tokens} tokens/turn "
        f"cap, {args.repeats} repeats"
    )
    print(
        "| concurrency | agentenvs s | raw same work s | raw same outcome s | overhead (same work) "
        "| overhead (same outcome) | client CPU share | load |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row.concurrency} | {row.median('agentenvs'):.2f} ({row.spread('agentenvs')}) | "
            f"{row.median('same_work'):.2f} ({row.spread('same_work')}) | "
            f"{row.median('same_outcome'):.2f} ({row.spread('same_outcome')}) | "
            f"{100 * row.overhead('same_work'):.1f}% ({row.overhead_spread('same_work')}) | "
            f"{100 * row.overhead('same_outcome'):.1f}% ({row.overhead_spread('same_outcome')}) | "
            f"{100 * row.cpu_share():.1f}% | {row.load_before:.2f}-{row.load_after:.2f} |"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "concurrency": r.concurrency,
                        "load": [r.load_before, r.load_after],
                        "runs": {s: [asdict(run) for run in runs] for s, runs in r.runs.items()},
                    }
                    for r in rows
                ],
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
