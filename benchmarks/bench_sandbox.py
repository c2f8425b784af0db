"""Local sandbox latency, throughput and leak check, side by side with the naive approach.

Measures, in one run on this machine:

* ``print(1)``, a numpy+sympy cell and a stateful session cell through the warm local
  backend (bubblewrap + every isolation layer active on the machine);
* the common approach: a fresh ``python -c`` subprocess per call with only a timeout
  (no isolation at all), same interpreter (Debian's ``/usr/bin/python3``);
* a leak check: N executions (mixed outcomes), then host processes, descriptors and
  cgroup directories are counted against the numbers before.

Usage: ``python benchmarks/bench_sandbox.py [--n 300] [--leak-runs 10000] [--json out.json]``
Prints a markdown table; the ratios are what to compare across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from pathlib import Path

from agentenvs.sandbox import ExecStatus, SandboxConfig
from agentenvs.sandbox.backends.local.backend import LocalSandbox

PYTHON = "/usr/bin/python3"
NUMPY_SYMPY = (
    "import numpy as np, sympy as sp\n"
    "x = sp.Symbol('x')\n"
    "print(int(np.linalg.matrix_rank(np.eye(8))), sp.integrate(x**2, (x, 0, 3)))"
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(latencies: list[float], wall: float, count: int) -> dict:
    return {
        "p50_ms": percentile(latencies, 50) * 1e3,
        "p99_ms": percentile(latencies, 99) * 1e3,
        "mean_ms": statistics.fmean(latencies) * 1e3,
        "throughput_per_s": count / wall,
        "n": count,
    }


async def fresh_subprocess(code: str, timeout: float) -> tuple[int | None, bytes]:
    """The naive baseline: a new interpreter per call, killed on timeout, nothing else."""
    proc = await asyncio.create_subprocess_exec(
        PYTHON, "-c", code, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None, b""
    return proc.returncode, out


async def measure(call, n: int, concurrency: int) -> dict:
    """Sequential latency over ``n`` calls, then throughput with ``concurrency`` callers."""
    for _ in range(3):
        await call()
    latencies = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        latencies.append(time.perf_counter() - start)
    seq_wall = sum(latencies)
    queue = list(range(n))

    async def caller() -> None:
        while queue:
            queue.pop()
            await call()

    start = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    result = summary(latencies, seq_wall, n)
    result["throughput_per_s"] = n / (time.perf_counter() - start)
    result["callers"] = concurrency
    return result


def host_children() -> set[int]:
    me = str(os.getpid())
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me and fields[0] != "Z":
                found.add(int(name))
    return found


def agentenvs_cgroups() -> int:
    count = 0
    for root in (
        Path("/sys/fs/cgroup/memory"),
        Path("/sys/fs/cgroup/pids"),
        Path("/sys/fs/cgroup"),
    ):
        if root.is_dir():
            count += sum(1 for _ in root.rglob(f"agentenvs-{os.getpid()}-*"))
    return count


async def leak_check(runs: int, pool_size: int) -> dict:
    fds_before = len(os.listdir("/proc/self/fd"))
    children_before = host_children()
    cgroups_before = agentenvs_cgroups()
    programs = [
        ("print(1)", ExecStatus.OK),
        ("raise ValueError('x')", ExecStatus.ERROR),
        (
            "import os\nif os.fork() == 0:\n    os.setsid()\n    import time; time.sleep(60)",
            ExecStatus.OK,
        ),
        ("print('x' * 100000)", ExecStatus.OUTPUT_LIMIT),
        ("open('f', 'w').write('x' * 1000)", ExecStatus.OK),
    ]
    sandbox = LocalSandbox(SandboxConfig(pool_size=pool_size, timeout=5, max_output_bytes=4096))
    await sandbox.start()
    wrong = 0
    start = time.perf_counter()
    done = 0
    while done < runs:
        batch = [
            programs[(done + i) % len(programs)] for i in range(min(pool_size * 4, runs - done))
        ]
        results = await asyncio.gather(*(sandbox.run(code) for code, _ in batch))
        wrong += sum(r.status != want for r, (_, want) in zip(results, batch, strict=True))
        done += len(batch)
    wall = time.perf_counter() - start
    during_fds = len(os.listdir("/proc/self/fd"))
    during_children = host_children() - children_before - sandbox.host_pids()
    await sandbox.close()
    await asyncio.sleep(0.2)
    return {
        "runs": runs,
        "wall_s": wall,
        "unexpected_status": wrong,
        "fds_before": fds_before,
        "fds_with_pool_open": during_fds,
        "fds_after_close": len(os.listdir("/proc/self/fd")),
        "stray_children_with_pool_open": len(during_children),
        "children_after_close": len(host_children() - children_before),
        "cgroups_after_close": agentenvs_cgroups() - cgroups_before,
        "workers_spawned": sandbox.stats["spawned"],
    }


async def main(args: argparse.Namespace) -> dict:
    report: dict = {
        "machine": {
            "cpus": os.cpu_count(),
            "cpu": platform.processor() or platform.machine(),
            "kernel": platform.release(),
            "loadavg_at_start": os.getloadavg(),
            "date": time.strftime("%Y-%m-%d"),
        }
    }
    config = SandboxConfig(pool_size=args.pool_size, timeout=10)
    sandbox = LocalSandbox(config)
    await sandbox.start()
    caps = sandbox.capabilities()
    report["active_layers"] = sorted(k for k, v in caps.active.items() if v)
    report["inactive_layers"] = sorted(k for k, v in caps.active.items() if not v)

    async def sandboxed(code: str):
        async def call() -> None:
            result = await sandbox.run(code)
            assert result.ok, result

        return call

    def naive(code: str):
        async def call() -> None:
            rc, _ = await fresh_subprocess(code, 30)
            assert rc == 0

        return call

    rows = {}
    rows["local print(1)"] = await measure(await sandboxed("print(1)"), args.n, args.pool_size)
    rows["fresh subprocess print(1)"] = await measure(naive("print(1)"), args.n, args.pool_size)
    rows["local numpy+sympy"] = await measure(await sandboxed(NUMPY_SYMPY), args.n, args.pool_size)
    rows["fresh subprocess numpy+sympy"] = await measure(
        naive(NUMPY_SYMPY), max(10, args.n // 10), args.pool_size
    )
    async with sandbox.session() as session:
        await session.run("import numpy as np\nx = 0\nhist = []")

        async def cell() -> None:
            result = await session.run("x += 1\nhist.append(x)\nlen(hist)")
            assert result.ok, result

        rows["local session cell"] = await measure(cell, args.n, 1)
    await sandbox.close()
    report["rows"] = rows
    report["ratios"] = {
        "print(1) p50 speed-up vs fresh subprocess": rows["fresh subprocess print(1)"]["p50_ms"]
        / rows["local print(1)"]["p50_ms"],
        "numpy+sympy p50 speed-up vs fresh subprocess": rows["fresh subprocess numpy+sympy"][
            "p50_ms"
        ]
        / rows["local numpy+sympy"]["p50_ms"],
    }
    if args.leak_runs:
        report["leak_check"] = await leak_check(args.leak_runs, args.pool_size)
    return report


def print_markdown(report: dict) -> None:
    m = report["machine"]
    print(
        f"Machine: {m['cpus']} CPUs ({m['cpu']}), kernel {m['kernel']}, {m['date']}, "
        f"load average at start {m['loadavg_at_start'][0]:.1f}"
    )
    print(f"Active layers: {', '.join(report['active_layers'])}")
    if report["inactive_layers"]:
        print(f"Inactive layers: {', '.join(report['inactive_layers'])}")
    print()
    print("| workload | p50 ms | p99 ms | mean ms | throughput /s | concurrent callers | n |")
    print("|---|---|---|---|---|---|---|")
    for name, row in report["rows"].items():
        print(
            f"| {name} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} | {row['mean_ms']:.1f} "
            f"| {row['throughput_per_s']:.0f} | {row['callers']} | {row['n']} |"
        )
    print()
    for name, value in report["ratios"].items():
        print(f"- {name}: {value:.1f}x")
    if "leak_check" in report:
        print(f"- leak check: {json.dumps(report['leak_check'])}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300, help="calls per latency measurement")
    parser.add_argument("--pool-size", type=int, default=2)
    parser.add_argument("--leak-runs", type=int, default=10_000)
    parser.add_argument("--json", type=Path, default=None)
    arguments = parser.parse_args()
    result = asyncio.run(main(arguments))
    print_markdown(result)
    if arguments.json:
        arguments.json.write_text(json.dumps(result, indent=2))
