"""Benchmark: ``agentenvs check`` on a 1,000-group store against parsing the same store.

Issue 45's bar: ``check`` on a 1,000-group store within 5x of parsing it, plus one
tokenizer load of at most 1 s, with memory bounded by one group at a time. This script

1. collects a few scripted groups of one environment on a real vocabulary (Qwen3 by
   default, built offline by ``tests/support/vocab``), copies them with fresh keys into
   a store of ``--groups`` groups, and saves the tokenizer as a directory;
2. times, side by side in one process and alternating (so machine load hits both
   alike), parsing the store (``read_store``) and checking it (``check_file``, every
   check, one group at a time); median of ``--repeats``;
3. times a cold tokenizer load in a fresh interpreter, the check's way
   (``inspect/vocab.py``: the serialized fast tokenizer, no transformers) and through
   ``transformers.AutoTokenizer``, imports included;
4. measures the peak Python memory of a check (``tracemalloc``) on the full store and
   on a quarter of it: bounded by a group, the two are about equal;
5. times ``--replay`` on ``--replay-groups`` groups (the env re-run per group).

    python benchmarks/bench_check.py --env search_r1 --groups 1000 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.vocab import shared_vocabulary
from support.vocab.runs import NoisyLogprobs, collect_store

from agentenvs.rollout.collect.store import read_store
from agentenvs.rollout.inspect.check import check_file
from agentenvs.rollout.policies import make_policy


def make_store(tokenizer, env: str, groups: int, folder: Path) -> Path:
    """Scripted groups of ``env`` (made-up logprobs), copied with fresh keys to ``groups``."""
    seed = collect_store(
        tokenizer, env, folder / "seed.jsonl", groups=4, group_size=2,
        policy=NoisyLogprobs(make_policy("scripted")),
    )  # fmt: skip
    lines = seed.read_text().splitlines()
    path = folder / f"{env}-{groups}.jsonl"
    with open(path, "w", encoding="utf-8") as out:
        for i in range(groups):
            record = json.loads(lines[i % len(lines)])
            record["key"] = f"{i}:{record['task_id']}"
            out.write(json.dumps(record) + "\n")
    return path


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def cold_load(directory: Path, how: str) -> tuple[float, float]:
    """(seconds to import the loader, seconds to load the tokenizer) in a fresh interpreter."""
    load = (
        "from agentenvs.rollout.inspect.vocab import load_check_tokenizer as load"
        if how == "check"
        else "from transformers import AutoTokenizer; load = AutoTokenizer.from_pretrained"
    )
    code = (
        f"import time; t = time.perf_counter(); {load}; i = time.perf_counter(); "
        f"load({str(directory)!r}); print(i - t, time.perf_counter() - i)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported, loaded = out.stdout.strip().splitlines()[-1].split()
    return float(imported), float(loaded)


def peak_memory(path: Path, tokenizer) -> float:
    """Peak MB Python allocated while checking ``path`` (tracemalloc)."""
    tracemalloc.start()
    check_file(path, tokenizer=tokenizer)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 1e6


def head(path: Path, groups: int, folder: Path) -> Path:
    part = folder / f"head-{groups}.jsonl"
    part.write_text("".join(path.read_text().splitlines(keepends=True)[:groups]))
    return part


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="search_r1")
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vocab", default="qwen3")
    parser.add_argument("--replay-groups", type=int, default=50)
    args = parser.parse_args()

    tokenizer = shared_vocabulary(args.vocab)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        store = make_store(tokenizer, args.env, args.groups, folder)
        tokenizer.save_pretrained(folder / "tok")
        parse, check = [], []
        for _ in range(args.repeats):
            parse.append(timed(lambda: read_store(store)))
            report = None

            def run() -> None:
                nonlocal report
                report = check_file(store, tokenizer=tokenizer)

            check.append(timed(run))
            assert report is not None and report.ok, [
                f for f in report.findings if f.status == "fail"
            ]
        fast = [cold_load(folder / "tok", "check") for _ in range(3)]
        slow = [cold_load(folder / "tok", "transformers") for _ in range(3)]
        whole = peak_memory(store, tokenizer)
        quarter = peak_memory(head(store, args.groups // 4, folder), tokenizer)
        replayed = head(store, args.replay_groups, folder)
        replay = timed(lambda: check_file(replayed, tokenizer=tokenizer, replay=True))
        size = store.stat().st_size / 1e6
    p, c = statistics.median(parse), statistics.median(check)
    load = statistics.median(x[1] for x in fast)
    print(f"{args.env} on {args.vocab}: {args.groups} groups, {size:.1f} MB")
    print(
        f"parse {p:.3f} s, check {c:.3f} s (median of {args.repeats}): check / parse {c / p:.2f}x"
    )
    print(f"tokenizer load, cold process: check's {load:.2f} s (runs {', '.join(f'{x[1]:.2f}' for x in fast)}; "
          f"import {statistics.median(x[0] for x in fast):.2f} s), transformers "
          f"{statistics.median(x[1] for x in slow):.2f} s (import {statistics.median(x[0] for x in slow):.2f} s)")  # fmt: skip
    print(f"bar: check <= 5 x parse + load: {c:.2f} <= {5 * p + load:.2f}: {c <= 5 * p + load}")
    print(f"peak Python memory of a check: {whole:.1f} MB ({args.groups} groups), "
          f"{quarter:.1f} MB ({args.groups // 4} groups)")  # fmt: skip
    print(f"--replay: {replay:.2f} s for {args.replay_groups} groups ({replay / args.replay_groups * 1000:.0f} ms a group)")  # fmt: skip
    load_avg = os.getloadavg()
    print(f"machine: {platform.machine()} {os.cpu_count()} cpus, python {platform.python_version()}, "
          f"load average {load_avg[0]:.1f} {load_avg[1]:.1f} {load_avg[2]:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
