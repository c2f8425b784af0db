"""Benchmark: trajectories to Tinker training data, ours against the Tinker cookbook.

Both sides get the same random multi-turn trajectories (a 200-token prompt, 3-5
turns of 50-200 sampled tokens each followed by a 50-200 token tool observation,
groups of 8) and produce ``tinker.Datum`` lists:

* cookbook: ``compute_advantages`` + ``assemble_training_data`` from
  ``tinker_cookbook.rl.data_processing``, on the cookbook's own trajectory types;
* ours: ``compute_advantages`` (GRPO) + ``assemble_tinker_data`` from agentenvs.

Rewards are 0, 0.5 or 1 so both advantage computations (cookbook in float32, ours
in float64) give the same numbers, and the script asserts the outputs are
identical field by field (dtypes, shapes, bits) before printing the ratio.

Large runs are cut into chunks (``--chunk``) that are generated, timed on both
sides, compared and freed one after the other, so that two copies of 100k
trajectories and two sets of outputs never have to fit in memory at once.

    python benchmarks/bench_training_data.py --sizes 1000 100000
"""

from __future__ import annotations

import argparse
import gc
import platform
import resource
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.data.advantages import compute_advantages
from agentenvs.rollout.trainers.tinker.handoff import assemble_tinker_data, to_cookbook_group

VOCAB = 150_000


def random_trajectory(rng: np.random.Generator) -> Trajectory:
    """One episode shaped like a tool-using agent's: each observation is the previous
    context plus the action plus the tool output, as the environments build it."""
    context = rng.integers(0, VOCAB, size=200).tolist()
    transitions = []
    turns = int(rng.integers(3, 6))
    for turn in range(turns):
        ob = list(context)
        length = int(rng.integers(50, 201))
        action = rng.integers(0, VOCAB, size=length).tolist()
        logprobs = (-rng.exponential(0.5, size=length)).tolist()
        done = turn == turns - 1
        transitions.append(Transition(ob, TokensWithLogprobs(action, logprobs), 0.0, done))
        observation = rng.integers(0, VOCAB, size=int(rng.integers(50, 201))).tolist()
        context = ob + action + observation
    return Trajectory(transitions)


def random_groups(n_trajectories: int, group_size: int, seed: int) -> list[TrajectoryGroup]:
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(n_trajectories // group_size):
        trajectories = [random_trajectory(rng) for _ in range(group_size)]
        rewards = rng.choice([0.0, 0.5, 1.0], size=group_size).tolist()
        groups.append(TrajectoryGroup(trajectories, rewards, [{} for _ in trajectories]))
    return groups


def assert_identical(ours, theirs) -> None:
    (datums, meta), (their_datums, their_meta) = ours, theirs
    assert meta == their_meta, "metadata differs"
    assert len(datums) == len(their_datums), "datum count differs"
    for a, b in zip(datums, their_datums, strict=True):
        assert a.model_input == b.model_input, "model_input differs"
        assert list(a.loss_fn_inputs) == list(b.loss_fn_inputs), "loss_fn_inputs keys differ"
        for key, x in a.loss_fn_inputs.items():
            y = b.loss_fn_inputs[key]
            assert x.dtype == y.dtype and x.shape == y.shape, f"{key}: dtype/shape differ"
            xa, ya = x.to_numpy(), y.to_numpy()
            assert xa.dtype == ya.dtype and xa.tobytes() == ya.tobytes(), f"{key}: values differ"


def run_cookbook(groups):
    from tinker_cookbook.rl import data_processing

    advantages = data_processing.compute_advantages(groups)
    return data_processing.assemble_training_data(groups, advantages)


def run_ours(groups):
    return assemble_tinker_data(groups, compute_advantages(groups, "grpo"))


@dataclass
class Timing:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def timed(fn, arg, timing: Timing):
    """Time ``fn(arg)`` including the young-generation garbage collection it leaves
    behind (ours pauses the collector while it builds; that deferred work counts)."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(arg)
    gc.collect(1)
    timing.cpu.append(time.process_time() - cpu)
    timing.wall.append(time.perf_counter() - wall)
    return out


def bench(n: int, group_size: int, chunk: int, repeats: int, seed: int) -> dict:
    """Time both sides on ``n`` trajectories, chunk by chunk; each side's time is the
    sum over chunks of its best of ``repeats`` runs (interleaved)."""
    ours_total, theirs_total = Timing(), Timing()
    tokens = datums = 0
    chunk = min(chunk or n, n)
    for start in range(0, n, chunk):
        groups = random_groups(min(chunk, n - start), group_size, seed + start)
        their_groups = [to_cookbook_group(g) for g in groups]
        ours_t, theirs_t = Timing(), Timing()
        for attempt in range(repeats):
            theirs = timed(run_cookbook, their_groups, theirs_t)
            ours = timed(run_ours, groups, ours_t)
            assert_identical(ours, theirs)
            if attempt == 0:
                datums += len(ours[0])
                tokens += sum(d.model_input.length + 1 for d in ours[0])
            del ours, theirs
        for total, part in ((ours_total, ours_t), (theirs_total, theirs_t)):
            total.wall.append(min(part.wall))
            total.cpu.append(min(part.cpu))
        del groups, their_groups
        gc.collect()
    result = {
        "trajectories": n,
        "datums": datums,
        "tokens": tokens,
        "ours_wall": sum(ours_total.wall),
        "cookbook_wall": sum(theirs_total.wall),
        "ours_cpu": sum(ours_total.cpu),
        "cookbook_cpu": sum(theirs_total.cpu),
        "chunks": len(ours_total.wall),
    }
    result["ratio_wall"] = result["cookbook_wall"] / result["ours_wall"]
    result["ratio_cpu"] = result["cookbook_cpu"] / result["ours_cpu"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument(
        "--chunk", type=int, default=10_000, help="trajectories per chunk; 0 = all at once"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per chunk (best kept)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    print(f"python {platform.python_version()} on {platform.platform()}")
    print(
        f"{'trajectories':>12} {'datums':>8} {'tokens':>12} {'cookbook s':>11} {'ours s':>8} "
        f"{'ratio':>6} {'cookbook cpu':>12} {'ours cpu':>8} {'cpu ratio':>9} {'chunks':>6}"
    )
    for n in args.sizes:
        r = bench(n, args.group_size, args.chunk, args.repeats if n <= args.chunk else 1, args.seed)
        print(
            f"{r['trajectories']:>12} {r['datums']:>8} {r['tokens']:>12} "
            f"{r['cookbook_wall']:>11.2f} {r['ours_wall']:>8.2f} {r['ratio_wall']:>5.1f}x "
            f"{r['cookbook_cpu']:>12.2f} {r['ours_cpu']:>8.2f} {r['ratio_cpu']:>8.1f}x "
            f"{r['chunks']:>6}",
            flush=True,
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"identical output: yes (asserted per chunk); peak RSS {peak:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
