"""ALFWorld env vs raw TextWorld on the same games, and episode throughput by worker count.

    python benchmarks/bench_alfworld.py [--repeats 3] [--episodes-per-game 4]

Part 1, in one run and interleaved game by game (so machine noise hits both sides):

* raw: ``textworld.start`` on the game with ALFWorld's demangler, as ALFWorld
  itself plays it; ``reset()`` of the loaded game, then each walkthrough command
  through ``step()``. Twice: in a fresh Python process that imports only TextWorld
  and ALFWorld (the baseline for the ratios: an engine process like ours), and in
  this process, which has also imported transformers and a tokenizer, the way a
  trainer process would be (the garbage collector then has more to walk);
* env: the same game through ``ALFWorldTextEnv`` (lease an engine in a worker
  process, ``start()``, each command as ``<action>...</action>`` through
  ``step()``), with Fast Downward's translation cache off (pure overhead) and on
  (the default), and through the token-level ``ALFWorldEnv`` (chat template and
  tokenizer included).

Reported: mean reset and step time of each, and env / raw ratios (target <= 1.1).

Part 2: episodes per second for the scripted oracle over every train game,
``--episodes-per-game`` episodes each, all groups in flight at once, with 1, 2 and
8 worker processes sharing 8 engines (``engines_per_worker`` = 8 / workers, so at
most 8 episodes run at a time in every setting); warm: workers started first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path


def raw_env(game_path: str):
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler

    infos = textworld.EnvInfos(won=True, admissible_commands=True)
    return textworld.start(
        game_path, request_infos=infos, wrappers=[AlfredDemangler(shuffle=False)]
    )


def time_raw(env, walkthrough: list[str]) -> tuple[float, list[float]]:
    start = time.perf_counter()
    env.reset()
    reset = time.perf_counter() - start
    steps = []
    for command in walkthrough:
        start = time.perf_counter()
        state, _, _ = env.step(command)
        steps.append(time.perf_counter() - start)
    assert state["won"], "raw replay did not win"
    return reset, steps


def raw_in_clean_process(game_path: str, walkthrough: list[str], repeats: int) -> dict:
    """Time raw TextWorld in a fresh interpreter (this file run with ``--raw``)."""
    out = subprocess.run(
        [sys.executable, __file__, "--raw", game_path, "--repeats", str(repeats)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def raw_main(game_path: str, repeats: int) -> None:
    walkthrough = json.loads(Path(game_path).read_text())["walkthrough"]
    env = raw_env(game_path)
    time_raw(env, walkthrough)  # warm, like the other sides
    resets, steps = [], []
    for _ in range(repeats):
        reset, step_times = time_raw(env, walkthrough)
        resets.append(reset)
        steps += step_times
    print(json.dumps({"reset": resets, "step": steps}))


async def time_text_env(cfg, index: int, walkthrough: list[str]) -> tuple[float, list[float]]:
    task = cfg.make_text_env(index)
    start = time.perf_counter()
    await task.start()
    reset = time.perf_counter() - start
    steps = []
    for command in walkthrough:
        start = time.perf_counter()
        result = await task.step(f"<action>{command}</action>", stop_reason="stop")
        steps.append(time.perf_counter() - start)
    await task.close()
    assert result.done and result.metrics["won"] == 1, "env replay did not win"
    return reset, steps


async def time_token_env(cfg, index: int, walkthrough: list[str], tokenizer):
    env = cfg.make_env(index, tokenizer)
    start = time.perf_counter()
    await env.initial_observation()
    reset = time.perf_counter() - start
    steps = []
    for command in walkthrough:
        tokens = tokenizer.encode(f"<action>{command}</action>", add_special_tokens=False)
        start = time.perf_counter()
        result = await env.step(tokens, extra={"stop_reason": "stop"})
        steps.append(time.perf_counter() - start)
    await env.close()
    assert result.episode_done and result.metrics["won"] == 1
    return reset, steps


async def overhead(repeats: int, tokenizer) -> dict:
    from agentenvs.envs import make

    configs = {
        "env (no translation cache)": make(
            "alfworld", data="shipped", workers=1, engines_per_worker=1, cache_translations=False
        ),
        "env (default)": make("alfworld", data="shipped", workers=1, engines_per_worker=1),
    }
    token_cfg = configs["env (default)"]
    games = token_cfg.games("train")
    results: dict[str, dict[str, list[float]]] = {
        name: {"reset": [], "step": []}
        for name in [
            "raw textworld (clean process)",
            "raw textworld (this process)",
            *configs,
            "token-level env (default)",
        ]
    }
    for index, game in enumerate(games):
        walkthrough = json.loads(Path(game.path).read_text())["walkthrough"]
        raw = raw_env(game.path)
        # Warm every side on this game (loads it), then time `repeats` episodes each.
        time_raw(raw, walkthrough)
        for cfg in configs.values():
            await time_text_env(cfg, index, walkthrough)
        clean = raw_in_clean_process(game.path, walkthrough, repeats)
        results["raw textworld (clean process)"]["reset"] += clean["reset"]
        results["raw textworld (clean process)"]["step"] += clean["step"]
        for _ in range(repeats):
            reset, steps = time_raw(raw, walkthrough)
            results["raw textworld (this process)"]["reset"].append(reset)
            results["raw textworld (this process)"]["step"] += steps
            for name, cfg in configs.items():
                reset, steps = await time_text_env(cfg, index, walkthrough)
                results[name]["reset"].append(reset)
                results[name]["step"] += steps
            reset, steps = await time_token_env(token_cfg, index, walkthrough, tokenizer)
            results["token-level env (default)"]["reset"].append(reset)
            results["token-level env (default)"]["step"] += steps
        raw.close()
        print(f"  {game.name}: done", flush=True)
    for cfg in configs.values():
        cfg.shutdown()
    return {
        name: {kind: statistics.mean(values) for kind, values in timings.items()}
        for name, timings in results.items()
    }


async def throughput(workers: int, episodes_per_game: int, tokenizer) -> tuple[int, float]:
    from agentenvs.envs import make
    from agentenvs.rollout.collect.rollouts import do_group_rollout
    from agentenvs.rollout.policies import make_policy

    cfg = make("alfworld", data="shipped", workers=workers, engines_per_worker=max(1, 8 // workers))
    policy = make_policy("scripted")
    n_games = cfg.num_tasks("train")
    # Warm-up: start every worker and load the games on the engines that will play them.
    await asyncio.gather(
        *(
            do_group_rollout(cfg.group_builder(i, episodes_per_game, tokenizer), policy)
            for i in range(n_games)
        )
    )
    start = time.perf_counter()
    groups = await asyncio.gather(
        *(
            do_group_rollout(cfg.group_builder(i, episodes_per_game, tokenizer), policy)
            for i in range(n_games)
        )
    )
    elapsed = time.perf_counter() - start
    episodes = sum(len(g.trajectories) for g in groups)
    assert all(r == cfg.success_reward for g in groups for r in g.total_rewards())
    cfg.shutdown()
    return episodes, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--episodes-per-game", type=int, default=4)
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 8])
    parser.add_argument("--raw", help=argparse.SUPPRESS)  # internal: time one game, raw
    args = parser.parse_args()
    if args.raw:
        raw_main(args.raw, args.repeats)
        return

    from agentenvs.rollout.tokenizer import train_chatml_tokenizer

    tokenizer = train_chatml_tokenizer()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d')}"
    )
    print(f"part 1: env vs raw textworld, {args.repeats} episodes per train game")
    means = asyncio.run(overhead(args.repeats, tokenizer))
    raw = means["raw textworld (clean process)"]
    print(f"{'':30s} {'reset ms':>9s} {'step ms':>9s} {'reset/raw':>10s} {'step/raw':>9s}")
    for name, m in means.items():
        print(
            f"{name:30s} {m['reset'] * 1e3:9.1f} {m['step'] * 1e3:9.1f} "
            f"{m['reset'] / raw['reset']:10.2f} {m['step'] / raw['step']:9.2f}"
        )
    print(
        f"part 2: episodes/s, {args.episodes_per_game} episodes per train game, "
        "all in flight, 8 engines in total"
    )
    for workers in args.workers:
        episodes, elapsed = asyncio.run(throughput(workers, args.episodes_per_game, tokenizer))
        print(
            f"  {workers} worker(s): {episodes} episodes in {elapsed:.1f}s = {episodes / elapsed:.2f} episodes/s"
        )


if __name__ == "__main__":
    main()
