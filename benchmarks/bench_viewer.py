"""The viewer at the scale of a real run: 100 Search-R1 groups of 4 (issue 13).

Measured side by side in one process, on one store made by the scripted oracle:

* page build time with the byte-level decoder (each span decoded once, tokens
  mapped to offsets) and with the per-token decoder every tokenizer falls back
  to (what every page used before), and their ratio;
* page size against the JSONL it shows (target: at most 2x);
* time for headless Chromium (Debian's package) to open the page until the
  first group is drawn (target: under 3 s);
* the terminal view of every group into a buffer, and with ``--limit 10``.

Run: ``python benchmarks/bench_viewer.py [--groups 100] [--group-size 4]``.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from agentenvs.rollout import CollectOptions, DatasetSpec, EnvSpec, RunSpec, StoreSpec, run
from agentenvs.rollout.cli.demo import demo_overrides
from agentenvs.rollout.inspect import decode
from agentenvs.rollout.inspect.terminal_view import render_terminal
from agentenvs.rollout.inspect.viewer import load_records, render_html
from agentenvs.rollout.tokenizer import load_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.browser_cdp import chromium_binary, open_browser


def timed(work) -> tuple[float, object]:
    start = time.perf_counter()
    value = work()
    return time.perf_counter() - start, value


def open_time(page_path: Path) -> float:
    with open_browser() as page:
        start = time.perf_counter()
        page.navigate(page_path.as_uri())
        page.wait_for("document.body && document.body.dataset.ready === '1'", guard_s=120)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--group-size", type=int, default=4)
    args = parser.parse_args()

    tokenizer = load_tokenizer("builtin")
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "search_r1.jsonl"
        spec = RunSpec(
            EnvSpec("search_r1", demo_overrides("search_r1")),
            DatasetSpec(groups=args.groups, group_size=args.group_size),
            limits=CollectOptions(progress=False),
            store=StoreSpec(store),
        )
        run(spec, tokenizer=tokenizer)
        records = load_records(store)
        fast_s, page = timed(lambda: render_html(records, tokenizer, source=str(store)))
        real_table = decode._byte_table
        decode._byte_table = lambda tok: None  # the per-token path, as before
        try:
            slow_s, _ = timed(lambda: render_html(records, tokenizer, source=str(store)))
        finally:
            decode._byte_table = real_table
        page_path = Path(tmp) / "view.html"
        page_path.write_text(str(page), encoding="utf-8")
        jsonl_bytes = store.stat().st_size
        page_bytes = page_path.stat().st_size
        browser_s = open_time(page_path) if chromium_binary() else float("nan")
        quiet = Console(file=io.StringIO(), width=160, color_system=None)
        terminal_s, _ = timed(lambda: render_terminal(records, tokenizer, quiet))
        limited_s, _ = timed(lambda: render_terminal(records, tokenizer, quiet, limit=10))

    load = os.getloadavg()[0]
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, load {load:.1f}"
    )
    print(
        f"store: {len(records)} search_r1 groups of {args.group_size}, {jsonl_bytes / 1e6:.2f} MB"
    )
    print(f"| page build, byte-level decoder | {fast_s:.2f} s |")
    print(f"| page build, per-token decoder (before) | {slow_s:.2f} s |")
    print(f"| speed-up | {slow_s / fast_s:.1f}x |")
    print(f"| page size / JSONL size | {page_bytes / 1e6:.2f} MB / {jsonl_bytes / 1e6:.2f} MB = "
          f"{page_bytes / jsonl_bytes:.2f}x |")  # fmt: skip
    print(f"| headless Chromium, open to first group drawn | {browser_s:.2f} s |")
    print(f"| terminal view, all groups | {terminal_s:.2f} s |")
    print(f"| terminal view, --limit 10 | {limited_s:.2f} s |")


if __name__ == "__main__":
    main()
