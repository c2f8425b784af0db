"""The resume step of one ``collect()`` call: a full read of the store vs its resume index.

    python benchmarks/bench_store_index.py [--records 1000 --records 10000] [--repeats 5]
        [--step-groups 8]

A training loop calls ``collect`` once per step into one store, and every call
first decides what to skip. Before the index that meant parsing the whole file
(every trajectory of every record); now a long-lived ``TrajectoryStore`` parses
only the lines appended since its last call. The records are real: one
``collect`` of guess_number groups (scripted policy, builtin tokenizer), copied
under fresh keys until the store holds the size asked for. Each repeat is one
training step: ``--step-groups`` records are appended, then the resume step runs
both ways side by side on the same file (interleaved, so machine noise hits both):

- full read: ``keys_to_skip(path, store.contents().records, ...)``, the old code;
- index, own appends: the store object that appended them (its index takes them in
  as it writes, so nothing is parsed);
- index, another writer's appends: a second long-lived store object, which parses
  just the step's lines;
- cold index: a fresh store object building its index from the whole file (the
  first ``collect`` of a process).

Medians of ``--repeats`` are printed, with each index's speed-up over the full read.
The script asserts every way skips the same keys.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agentenvs.envs import make
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.run_identity import RunIdentity, keys_to_skip
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.tokenizer import load_tokenizer


def real_records(groups: int, group_size: int) -> list[GroupRecord]:
    dataset = make("guess_number").dataset(
        load_tokenizer("builtin"), group_size=group_size, n_groups=groups
    )
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    result = asyncio.run(collect(builders, make_policy("scripted"), CollectOptions(progress=False)))
    return result.records


def fill(store: TrajectoryStore, templates: list[GroupRecord], count: int, start: int) -> None:
    for i in range(start, start + count):
        store.append(dataclasses.replace(templates[i % len(templates)], key=f"g{i:07d}"))


def timed(work: Callable[[], set[str]]) -> tuple[float, set[str]]:
    began = time.perf_counter()
    skipped = work()
    return time.perf_counter() - began, skipped


def measure(size: int, templates: list[GroupRecord], args: argparse.Namespace) -> dict:
    identity = RunIdentity.from_json(templates[0].run)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "store.jsonl"
        writer = TrajectoryStore(path)
        fill(writer, templates, size, 0)
        observer = TrajectoryStore(path)  # a second process's view: parses what others wrote
        writer.resume_facts()
        observer.resume_facts()
        ways: dict[str, Callable[[], set[str]]] = {
            "full read": lambda: keys_to_skip(
                path, TrajectoryStore(path).contents().records, identity, new_run=False
            ),
            "index, own appends": lambda: keys_to_skip(
                path, writer.resume_facts(), identity, new_run=False
            ),
            "index, another writer's": lambda: keys_to_skip(
                path, observer.resume_facts(), identity, new_run=False
            ),
            "cold index": lambda: keys_to_skip(
                path, TrajectoryStore(path).resume_facts(), identity, new_run=False
            ),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        written = size
        for _ in range(args.repeats):
            fill(writer, templates, args.step_groups, written)
            written += args.step_groups
            answers = set()
            for name, work in ways.items():
                seconds, skipped = timed(work)
                times[name].append(seconds)
                answers.add(frozenset(skipped))
            assert len(answers) == 1, "the ways disagree on what to skip"
            assert len(next(iter(answers))) == written
        megabytes = path.stat().st_size / 1e6
    return {"size": size, "mb": megabytes, **{k: statistics.median(v) for k, v in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, action="append")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--step-groups", type=int, default=8)
    parser.add_argument("--template-groups", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=4)
    args = parser.parse_args()
    sizes = args.records or [1000, 10000]
    templates = real_records(args.template_groups, args.group_size)
    print(
        f"# {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load {os.getloadavg()[0]:.2f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print(
        f"# guess_number records, groups of {args.group_size}; {args.step_groups} appended per "
        f"step; median of {args.repeats} steps; times in ms"
    )
    header = ("records", "MB", "full read", "index, own", "x", "index, other's", "x", "cold", "x")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for size in sizes:
        row = measure(size, templates, args)
        full = row["full read"]
        cells = [f"{row['size']:,}", f"{row['mb']:.1f}", f"{full * 1e3:.1f}"]
        for name in ("index, own appends", "index, another writer's", "cold index"):
            cells += [f"{row[name] * 1e3:.2f}", f"{full / row[name]:.1f}x"]
        print("| " + " | ".join(cells) + " |", flush=True)
    print(f"# load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
