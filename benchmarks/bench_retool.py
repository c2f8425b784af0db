"""ReTool environment throughput with a zero-latency scripted policy.

Measures, in one run on the same machine:

* episodes/s of the env driven by the scripted oracle (which costs nothing to
  "sample"), sequentially and with concurrent episodes;
* the share of wall time spent inside the sandbox (each episode times its own
  sandbox calls); with one episode at a time the rest is the env itself:
  rendering, tokenizing, parsing, grading with math-verify;
* the same with trivial programs (``print(<answer>)``), which isolates the fixed
  cost per episode from the cost of the shipped solutions' own computation.

Run: ``python benchmarks/bench_retool.py [--episodes 134] [--concurrency 4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from agentenvs.envs.registry import make
from agentenvs.envs.retool.config import ReToolConfig
from agentenvs.envs.retool.sandboxes import close_shared_sandboxes, shared_sandbox
from agentenvs.rollout.collect.rollouts import do_single_rollout
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.tokenizer import train_chatml_tokenizer


async def run_episodes(
    config: ReToolConfig, tokenizer, episodes: int, concurrency: int
) -> dict[str, float]:
    policy_factory = make_policy("scripted")
    total = config.num_tasks()
    semaphore = asyncio.Semaphore(concurrency)
    rewards: list[float] = []
    sandbox_seconds: list[float] = []

    async def one(index: int) -> None:
        async with semaphore:
            env = config.make_env(index % total, tokenizer)
            trajectory = await do_single_rollout(policy_factory(env), env)  # type: ignore[operator]
            final = trajectory.transitions[-1].metrics
            rewards.append(trajectory.step_reward)
            sandbox_seconds.append(float(final.get("sandbox_seconds", 0.0)))

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(episodes)))
    wall = time.perf_counter() - started
    return {
        "episodes": episodes,
        "concurrency": concurrency,
        "wall_s": wall,
        "episodes_per_s": episodes / wall,
        "mean_reward": statistics.fmean(rewards),
        # Sandbox time is summed over episodes; divided by concurrency it is the
        # share of the wall clock the sandbox was busy on each episode "lane".
        "sandbox_share": sum(sandbox_seconds) / (wall * concurrency),
        "sandbox_ms_per_episode": 1000 * statistics.fmean(sandbox_seconds),
        # Per-episode wall time outside the sandbox (meaningful at concurrency 1):
        # prompt rendering, tokenizing, parsing, formatting, math-verify grading.
        "env_ms_per_episode": 1000
        * (wall * concurrency / episodes - statistics.fmean(sandbox_seconds)),
    }


def trivial_problems(source: ReToolConfig, directory: Path) -> str:
    """The shipped questions and answers without solution programs: the oracle then
    runs ``print(<answer>)``, so sandbox time is the fixed cost of one execution."""
    path = directory / "trivial.jsonl"
    with path.open("w") as handle:
        for p in source.problems():
            handle.write(json.dumps({"prompt": p.question, "answer": p.answer}) + "\n")
    return str(path)


async def main(episodes: int, concurrency: int) -> None:
    tokenizer = train_chatml_tokenizer()
    base = make("retool")
    with tempfile.TemporaryDirectory() as tmp:
        trivial = trivial_problems(base, Path(tmp))
        setups = [
            ("shipped solutions, retool protocol", {}),
            ("shipped solutions, tool_call protocol", {"protocol": "tool_call"}),
            ("print(answer), retool protocol", {"data_path": trivial}),
        ]
        print(
            f"machine: {platform.machine()} {platform.system()}, python {platform.python_version()}"
        )
        # Warm the shared sandbox and math-verify once, outside the timings.
        await shared_sandbox(base.sandbox)
        await run_episodes(base, tokenizer, 2, 1)
        print(
            f"{'setup':40s} {'conc':>4s} {'episodes/s':>10s} {'sandbox share':>13s} "
            f"{'sandbox ms/ep':>13s} {'other ms/ep':>11s} {'reward':>6s}"
        )
        for label, overrides in setups:
            config = make("retool", **overrides)
            for conc in (1, concurrency):
                r = await run_episodes(config, tokenizer, episodes, conc)
                print(
                    f"{label:40s} {conc:4d} {r['episodes_per_s']:10.1f} "
                    f"{100 * r['sandbox_share']:12.1f}% {r['sandbox_ms_per_episode']:13.1f} "
                    f"{r['env_ms_per_episode']:11.1f} {r['mean_reward']:6.2f}"
                )
    await close_shared_sandboxes()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=134)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(main(args.episodes, args.concurrency))
