"""The sandbox server's memory under a bounded flood of large bodies (issue #40, class 6).

Against a fresh ``agentenvs sandbox serve --backend local``, one run:

* **idle**: the server process's resident memory once it answers;
* **flood of invalid bodies**: ``--bodies`` clients at once, each POSTing a body of
  ``--body-mib`` MiB (a ``stdin`` over its 8 MiB cap: read and parsed, then a 422), the
  issue's measurement (8 x 38 MiB took the server from 62 to 551 MB);
* **flood of valid bodies**: the same number at once of the largest valid body (16 MiB of
  files, 8 MiB of stdin: ~30 MiB each, which run);
* **half-open connections**: ``--half-open`` connections, half sending nothing and half
  an unfinished request head; how many the server has closed ``--client-timeout`` + 2 s
  later.

The server's resident memory is sampled every 10 ms (``/proc/<pid>/status``); printed:
its peak per phase, the answers' statuses, the phase's wall time.

Usage: ``python benchmarks/bench_sandbox_flood.py [--bodies 8] [--body-mib 38]
[--half-open 300] [--client-timeout 2]``
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import platform
import socket
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from bench_sandbox_hostile import server

MIB = 1024 * 1024


class MemorySampler:
    """The server's resident memory, every 10 ms, in a thread; ``peak`` since ``reset``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def now(self) -> int:
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self.now())

    def reset(self) -> None:
        self.peak = self.now()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def flood(url: str, body: bytes, count: int) -> tuple[Counter[int], float]:
    """``count`` POSTs of ``body`` at once; their statuses and the wall time."""

    def post(_: int) -> int:
        try:
            response = httpx.post(
                f"{url}/run_code",
                content=body,
                headers={"content-type": "application/json"},
                timeout=120,
            )
            return response.status_code
        except httpx.HTTPError:
            return -1

    start = time.perf_counter()
    with ThreadPoolExecutor(count) as pool:
        statuses = Counter(pool.map(post, range(count)))
    return statuses, time.perf_counter() - start


def half_open(port: int, count: int, wait: float) -> int:
    """Open ``count`` connections (half silent, half with half a head); how many the
    server closed within ``wait`` seconds."""
    sockets = []
    for i in range(count):
        sock = socket.create_connection(("127.0.0.1", port))
        if i % 2:
            sock.sendall(b"POST /run_code HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")
        sockets.append(sock)
    time.sleep(wait)
    closed = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            closed += sock.recv(1) == b""
        except BlockingIOError:
            pass
        except ConnectionResetError:
            closed += 1
        sock.close()
    return closed


LIFTED = """
import sys
from uvicorn.protocols.http.h11_impl import H11Protocol
from agentenvs.sandbox.base import SandboxConfig
from agentenvs.sandbox.server import app
from agentenvs.sandbox.server.connections import ClientLimits

class Unbounded(ClientLimits):
    def protocol(self):
        return H11Protocol  # uvicorn's own: no deadline for a request head

app.BODY_BUDGET_BYTES = 1 << 40  # every body admitted at once
config = SandboxConfig(pool_size=2, spare_workers=1, timeout=10, memory_limit_mb=512,
                       show_last_expression=False, max_output_bytes=1 << 20)
app.serve(port=int(sys.argv[1]), config=config, clients=Unbounded(body_seconds=3600))
"""
"""The same server with issue #40's bounds lifted: no body budget, no head deadline."""


def measure(args: argparse.Namespace, bodies: dict[str, bytes], script: str | None) -> dict:
    """One fresh server: idle memory, each flood, the half-open connections."""
    extra = ("--client-timeout", str(args.client_timeout))
    result: dict = {"floods": []}
    with server(args, extra=extra, script=script) as (url, pid):
        sampler = MemorySampler(pid)
        time.sleep(1.0)
        result["idle"] = sampler.now()
        for name, body in bodies.items():
            sampler.reset()
            statuses, seconds = flood(url, body, args.bodies)
            result["floods"].append((name, len(body) / MIB, statuses, seconds, sampler.peak))
        sampler.reset()
        port = int(url.rsplit(":", 1)[1])
        result["closed"] = half_open(port, args.half_open, args.client_timeout + 2.0)
        result["half_open_peak"] = sampler.peak
        sampler.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bodies", type=int, default=8, help="large bodies at once")
    parser.add_argument("--body-mib", type=float, default=38.0, help="size of each invalid body")
    parser.add_argument("--half-open", type=int, default=300)
    parser.add_argument("--client-timeout", type=float, default=2.0)
    args = parser.parse_args()
    args.pool_size, args.memory_mb, args.spare_workers = 2, 512, 1
    load = f"{os.getloadavg()[0]:.1f}"
    files = {f"f{i}.bin": base64.b64encode(os.urandom(4 * MIB)).decode() for i in range(4)}
    code = "print(len(open('f0.bin', 'rb').read()))"
    bodies = {
        "invalid": b'{"code": "print(1)", "stdin": "' + b"x" * int(args.body_mib * MIB) + b'"}',
        "valid": json.dumps({"code": code, "files": files, "stdin": "x" * (8 * MIB - 1)}).encode(),
    }
    runs = {"bounded (issue #40)": measure(args, bodies, None)}
    runs["bounds lifted (same code)"] = measure(args, bodies, LIFTED)
    print(
        f"\nmachine: {platform.machine()} {os.cpu_count()} cores, {platform.platform()}, "
        f"Python {platform.python_version()}; load average at start {load}; "
        f"--bodies {args.bodies}, --client-timeout {args.client_timeout}"
    )
    print("\n| server | flood | body MiB | answers | wall s | idle MB | peak MB | over idle MB |")
    print("|---|---|---|---|---|---|---|---|")
    for label, run in runs.items():
        idle = run["idle"]
        for name, size, statuses, seconds, peak in run["floods"]:
            answers = ", ".join(f"{status}: {n}" for status, n in sorted(statuses.items()))
            print(
                f"| {label} | {args.bodies} x {name} | {size:.1f} | {answers} | {seconds:.1f} | "
                f"{idle / MIB:.0f} | {peak / MIB:.0f} | {(peak - idle) / MIB:.0f} |"
            )
    for label, run in runs.items():
        print(
            f"\n{label}: {run['closed']}/{args.half_open} half-open connections closed by the "
            f"server within {args.client_timeout + 2.0:g} s (server peak "
            f"{run['half_open_peak'] / MIB:.0f} MB)"
        )


if __name__ == "__main__":
    main()
