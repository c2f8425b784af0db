"""Docker backend (through podman): warm containers vs a container per call, in one run.

Starts a private podman service (``agentenvs.sandbox.backends.docker.podman``), builds the image
if needed (timed), then measures per-execution latency, side by side:

* warm containers (``DockerSandbox``, the default): ``print(1)``, a numpy+sympy cell and a
  stateful session cell, sequentially; then throughput with ``pool_size`` concurrent
  callers;
* a container per call with the same supervisor (``mode="per_call"``);
* the common approach: ``docker run --rm image python3 -c CODE`` through the SDK
  (``containers.run``, same network/read-only/limits settings, no warm anything);
* for reference, the ``local`` backend's warm pool on ``print(1)`` (same run, same load).

Run: ``python benchmarks/bench_sandbox_docker.py [--runs 300] [--cold-runs 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time

from agentenvs.sandbox import SandboxConfig
from agentenvs.sandbox.backends.docker.backend import DockerSandbox
from agentenvs.sandbox.backends.docker.image import IMAGE_TAG, ensure_image
from agentenvs.sandbox.backends.docker.podman import PodmanService

PRINT = "print(1)"
NUMPY_SYMPY = (
    "import numpy as np, sympy as sp\n"
    "a = np.arange(100).reshape(10, 10)\n"
    "x = sp.Symbol('x')\n"
    "print(int((a @ a.T).trace()), sp.integrate(x**2, (x, 0, 3)))"
)


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "n": len(ordered),
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))],
        "mean_ms": 1000 * statistics.fmean(ordered),
    }


async def timed(call, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(n):
        start = time.perf_counter()
        result = await call()
        out.append(time.perf_counter() - start)
        assert result.ok, result
    return out


async def measure(
    host: str, runs: int, cold_runs: int, pool: int, with_local: bool = True
) -> dict[str, dict]:
    config = SandboxConfig(backend="docker", docker_host=host, pool_size=pool, timeout=30)
    rows: dict[str, dict] = {}
    start = time.perf_counter()
    async with DockerSandbox(config) as warm:
        rows["warm: start the pool"] = {"seconds": time.perf_counter() - start}
        await timed(lambda: warm.run(PRINT), 10)  # warm-up
        rows["warm: print(1)"] = summary(await timed(lambda: warm.run(PRINT), runs))
        rows["warm: numpy+sympy cell"] = summary(
            await timed(lambda: warm.run(NUMPY_SYMPY), max(20, runs // 5))
        )
        async with warm.session() as session:
            await session.run("total = 0")
            rows["warm: session cell"] = summary(
                await timed(lambda: session.run("total += 1\ntotal"), max(20, runs // 5))
            )
        begin = time.perf_counter()
        results = await asyncio.gather(*(warm.run(PRINT) for _ in range(runs)))
        elapsed = time.perf_counter() - begin
        assert all(r.ok for r in results)
        rows[f"warm: throughput, {runs} x print(1), {pool} at once"] = {"per_s": runs / elapsed}

    if with_local:  # reference: the local backend's warm pool, same run, same load
        from agentenvs.sandbox import SandboxUnavailable, create

        try:
            async with create(backend="local", pool_size=pool, timeout=30) as local:
                await timed(lambda: local.run(PRINT), 10)
                rows["reference: local backend, warm: print(1)"] = summary(
                    await timed(lambda: local.run(PRINT), runs)
                )
        except SandboxUnavailable as exc:
            print(f"(local backend unavailable: {exc})")

    async with DockerSandbox(config.model_copy(update={"pool_size": 1}), mode="per_call") as cold:
        rows["container per call (same supervisor): print(1)"] = summary(
            await timed(lambda: cold.run(PRINT), cold_runs)
        )
        rows["container per call (same supervisor): numpy+sympy cell"] = summary(
            await timed(lambda: cold.run(NUMPY_SYMPY), max(5, cold_runs // 2))
        )

    import docker

    client = docker.DockerClient(base_url=host)
    settings = {
        "network_mode": "none",
        "read_only": True,
        "user": "1000:1000",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "mem_limit": config.memory_limit_mb * 1024 * 1024,
        "pids_limit": 64,
        "tmpfs": {"/tmp": "size=64m"},
        "remove": True,
    }

    def docker_run(code: str) -> float:
        begin = time.perf_counter()
        out = client.containers.run(IMAGE_TAG, ["/usr/bin/python3", "-c", code], **settings)
        assert out, out
        return time.perf_counter() - begin

    rows["docker run --rm python3 -c: print(1)"] = summary(
        [docker_run(PRINT) for _ in range(cold_runs)]
    )
    client.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--cold-runs", type=int, default=20)
    parser.add_argument("--pool", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--no-local", action="store_true", help="skip the local backend's reference row"
    )
    args = parser.parse_args()
    service = PodmanService.start_new()
    try:
        import docker

        client = docker.DockerClient(base_url=service.docker_host)
        image = ensure_image(client)
        client.close()
        rows = asyncio.run(
            measure(service.docker_host, args.runs, args.cold_runs, args.pool, not args.no_local)
        )
    finally:
        service.stop()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    if args.json:
        print(
            json.dumps({"machine": machine, "image_build_s": image.seconds, "rows": rows}, indent=2)
        )
        return
    print(
        f"machine: {machine}; image {'built' if image.built else 'reused'} in {image.seconds:.1f} s"
    )
    warm = rows["warm: print(1)"]["p50_ms"]
    print("| setting | p50 ms | p99 ms | vs warm print(1) p50 |")
    print("|---|---|---|---|")
    for name, row in rows.items():
        if "p50_ms" in row:
            print(
                f"| {name} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} | {row['p50_ms'] / warm:.1f}x |"
            )
        elif "per_s" in row:
            print(f"| {name} | {row['per_s']:.0f} executions/s | | |")
        else:
            print(f"| {name} | {row['seconds']:.2f} s | | |")


if __name__ == "__main__":
    main()
