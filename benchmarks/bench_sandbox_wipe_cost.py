"""Issue 11 class 8: the cost a hostile run pushes onto the next innocent one.

On one local sandbox (pool_size 2), measured side by side in the same process: the
latency of an innocent ``print(1)`` right after an innocent run, and right after a run
that leaves N empty files in the work dir (N below and above the wipe budget, where the
worker is recycled in the background instead). Prints the ratios; the figures go to
benchmarks/RESULTS.md.

Run: .venv/bin/python benchmarks/bench_sandbox_wipe_cost.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from agentenvs.sandbox import SandboxConfig
from agentenvs.sandbox.backends.local.backend import LocalSandbox

LEAVE_FILES = (
    "import os\nfor i in range({n}):\n    os.close(os.open(f'f{{i}}', os.O_CREAT | os.O_WRONLY))"
)


async def innocent_after(sandbox: LocalSandbox, hostile: str | None) -> float:
    if hostile is not None:
        await sandbox.run(hostile, timeout=120)
    start = time.perf_counter()
    result = await sandbox.run("print(1)")
    elapsed = time.perf_counter() - start
    assert result.ok, result
    return elapsed


async def main(rounds: int) -> None:
    config = SandboxConfig(pool_size=2, workdir_size_mb=256, timeout=120)
    async with LocalSandbox(config, use_bwrap=True) as sandbox:
        cases = {"after an innocent run": None}
        for n in (5_000, 200_000):
            cases[f"after {n:,} files"] = LEAVE_FILES.format(n=n)
        medians = {}
        for name, hostile in cases.items():
            times = [await innocent_after(sandbox, hostile) for _ in range(rounds)]
            medians[name] = statistics.median(times)
        base = medians["after an innocent run"]
        for name, median in medians.items():
            print(f"{name:28s} median {median * 1000:8.1f} ms   x{median / base:6.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(main(parser.parse_args().rounds))
