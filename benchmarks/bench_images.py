"""Benchmark: store size and ``agentenvs check`` time per 1,000 image turns (issue 47).

Collects scripted runs of the charts environment (a chart in the prompt, a zoomed crop
from every tool call) on the offline Qwen2.5-VL vocabulary until the store holds
``--turns`` turns that show images, then reports, per 1,000 image turns:

* the JSONL's bytes and the image folder's bytes (each picture once, by hash), against
  what the same records would take with every turn's images inline as base64 (what a
  format without references writes: the whole context's pictures again at each turn);
* the time of ``check_file`` on the store, and of the image checks alone in the same
  run (placeholder runs, recorded counts against the processor, witnesses, stored
  pixels), so the share images add is read side by side under the same load.

    python benchmarks/bench_images.py --turns 1000 --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from agentenvs.envs import make
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.image_files import ImageFiles, images_dir
from agentenvs.rollout.collect.store import TrajectoryStore, read_store
from agentenvs.rollout.inspect.check import check_file
from agentenvs.rollout.inspect.image_checks import check_images
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.tokenizer import load_tokenizer


def collect_until(store: Path, turns: int, tokenizer) -> int:
    """Collect charts groups (2 episodes each) until ``turns`` image turns are stored."""
    config = make("charts", tasks=100_000, limits={"max_turns": 6})
    shown, batch, start = 0, 50, 0
    while shown < turns:
        dataset = config.dataset(tokenizer, group_size=2, n_groups=start + batch)
        builders = [dataset.get_batch(i)[0] for i in range(start, start + batch)]
        keys = [f"{i}:train/{i}" for i in range(start, start + batch)]
        result = asyncio.run(
            collect(builders, make_policy("scripted"), CollectOptions(concurrency=8, progress=False),
                    keys=keys, store=TrajectoryStore(store))
        )  # fmt: skip
        shown += sum(
            1 for r in result.ok for t in r.group.trajectories for tr in t.transitions if tr.images
        )
        start += batch
    return shown


def inline_bytes(store: Path) -> int:
    """The JSONL's size if every turn carried its observation's images as base64."""
    files = ImageFiles(store)
    size_of: dict[str, int] = {}
    total = store.stat().st_size
    for record in read_store(store).records:
        for traj in record.group.trajectories:
            for tr in traj.transitions:
                for placement in tr.images:
                    sha = placement.image.sha256
                    if sha not in size_of:
                        size_of[sha] = len(base64.b64encode(files.read(sha)))
                    total += size_of[sha]
    return total


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tokenizer = load_tokenizer("qwen2.5-vl")
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "charts.jsonl"
        started = time.perf_counter()
        shown = collect_until(store, args.turns, tokenizer)
        collect_s = time.perf_counter() - started
        per = 1000 / shown
        jsonl, pictures = store.stat().st_size, folder_bytes(images_dir(store))
        inline = inline_bytes(store)
        files = sum(1 for _ in images_dir(store).rglob("*.png"))
        records = read_store(store).latest()
        whole, alone = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            report = check_file(store)
            whole.append(time.perf_counter() - t0)
            assert report.ok, [f for f in report.findings if f.status == "fail"]
            t0 = time.perf_counter()
            check_images(records, store)
            alone.append(time.perf_counter() - t0)
    print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average at end {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"{shown} image turns in {len(records)} groups, {files} distinct images "
          f"(collected in {collect_s:.1f} s)")  # fmt: skip
    print(json.dumps({
        "per_1000_image_turns": {
            "jsonl_mb": round(jsonl * per / 1e6, 3),
            "image_folder_mb": round(pictures * per / 1e6, 3),
            "stored_total_mb": round((jsonl + pictures) * per / 1e6, 3),
            "inline_base64_mb": round(inline * per / 1e6, 3),
            "check_s_median": round(statistics.median(whole) * per, 3),
            "image_checks_s_median": round(statistics.median(alone) * per, 3),
        },
        "inline_over_stored": round(inline / (jsonl + pictures), 2),
        "image_checks_share_of_check": round(statistics.median(alone) / statistics.median(whole), 3),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
