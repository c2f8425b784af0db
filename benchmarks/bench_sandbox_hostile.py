"""Innocent clients next to a hostile one, against ``agentenvs sandbox serve`` (issue #11).

One run, two phases on the same fresh server, side by side:

* **quiet**: 3 innocent clients, each sending ``--n`` small programs one after another;
* **hostile**: the same 3 innocent clients, plus 1 client sending hostile programs in a
  loop (a rotating set: fork bomb, memory hog, 200k files, a deep directory tree,
  ``chmod 000`` directories, a /dev/shm hog, a System V shm hog, a busy loop, unbounded
  output, a detached background process, and since issue #24 a run that renices,
  ``SCHED_IDLE``s, pins and ``prlimit``s the supervisor, and one that leaves zombies;
  since issue #40 one that tries to set the times of every device node)
  until the innocent clients are done.

An innocent request is an error unless it answers HTTP 200, ``Success`` and the expected
stdout. Printed: innocent error rate, p50/p99 latency and requests/s for both phases and
their ratios (hostile / quiet). The target (issue #11): error rate 0, p99 within 2x.

Also printed: the hostile phase's innocent requests slower than the quiet p99, by the
hostile program running meanwhile (where the tail comes from); ``--trace`` writes every
request's start, end and in-worker time as JSON.

Usage: ``python benchmarks/bench_sandbox_hostile.py [--n 500] [--pool-size 2]
[--spare-workers 1] [--rounds 1] [--trace FILE]`` (``--rounds 4`` alternates quiet and
hostile phases, so that a shared machine's load falls on both alike)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

INNOCENT_CODE = "print(sum(range(1000)))"
INNOCENT_STDOUT = "499500\n"
INNOCENT_CLIENTS = 3

HOSTILE_PROGRAMS: dict[str, str] = {
    "fork_bomb": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    ),
    "memory_hog": "hog = []\nwhile True:\n    hog.append(bytearray(16 * 1024 * 1024))\n",
    "files_200k": (
        "import os\n"
        "for i in range(200_000):\n"
        "    try:\n"
        "        os.close(os.open(f'f{i}', os.O_CREAT | os.O_WRONLY))\n"
        "    except OSError:\n"
        "        break\n"
    ),
    "deep_tree": (
        "import os\n"
        "for _ in range(5000):\n"
        "    try:\n"
        "        os.mkdir('d')\n"
        "        os.chdir('d')\n"
        "    except OSError:\n"
        "        break\n"
    ),
    "chmod_000": (
        "import os\n"
        "os.makedirs('locked/inner/deeper', exist_ok=True)\n"
        "open('locked/inner/deeper/f', 'w').write('x')\n"
        "os.chmod('locked/inner', 0o000)\n"
        "os.chmod('locked', 0o000)\n"
        "os.makedirs('noexec/sub', exist_ok=True)\n"
        "os.chmod('noexec', 0o600)\n"
    ),
    "dev_shm_hog": (
        "size = 48 * 1024 * 1024\n"
        "try:\n"
        "    with open('/dev/shm/hog', 'wb') as f:\n"
        "        f.write(b'x' * size)\n"
        "except OSError:\n"
        "    pass\n"
    ),
    "sysv_shm_hog": (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        "size = 200 * 1024 * 1024\n"
        "seg = libc.shmget(0, ctypes.c_size_t(size), 0o1000 | 0o600)\n"
        "if seg >= 0:\n"
        "    addr = libc.shmat(seg, None, 0)\n"
        "    if addr not in (None, ctypes.c_void_p(-1).value):\n"
        "        ctypes.memset(addr, 120, size)\n"
    ),
    "busy_loop": "while True:\n    pass\n",
    "huge_output": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
    "background_process": (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(120)\n"
        "print('parent done')\n"
    ),
    # issue #24: reaching the supervisor that forks the next run
    "starve_the_supervisor": (
        "import os, resource\n"
        "parent = os.getppid()\n"
        "for attack in (\n"
        "    lambda: os.setpriority(os.PRIO_PROCESS, parent, 19),\n"
        "    lambda: os.sched_setscheduler(parent, os.SCHED_IDLE, os.sched_param(0)),\n"
        "    lambda: os.sched_setaffinity(parent, {0}),\n"
        "    lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE, (8, 8)),\n"
        "    lambda: resource.prlimit(parent, resource.RLIMIT_FSIZE, (0, 0)),\n"
        "    lambda: resource.prlimit(parent, resource.RLIMIT_STACK, (65536, 65536)),\n"
        "):\n"
        "    try:\n"
        "        attack()\n"
        "    except OSError:\n"
        "        pass\n"
    ),
    "zombies": (
        "import os\n"
        "for _ in range(40):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            os._exit(0)\n"
        "    except OSError:\n"
        "        break\n"
    ),
    "device_nodes": (  # issue #40: the times of every node under /dev, by number of calls
        "import os\n"
        "for root, dirs, files in os.walk('/dev'):\n"
        "    for name in files:\n"
        "        try:\n"
        "            os.utime(os.path.join(root, name))\n"
        "        except OSError:\n"
        "            pass\n"
    ),
}


HOSTILE_ROTATION = itertools.cycle(HOSTILE_PROGRAMS)
"""One rotation for the whole run: with ``--rounds``, each hostile phase goes on where
the previous one stopped, so every program is sent as often as in one long phase."""


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


@dataclass
class Phase:
    name: str
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    wall: float = 0.0
    hostile: Counter[str] = field(default_factory=Counter)
    spans: list[tuple[float, float, float]] = field(default_factory=list)
    """(start, end, seconds the code ran in its worker) of every innocent request."""
    hostile_spans: list[tuple[str, float, float]] = field(default_factory=list)
    """(program, start, end) of every hostile request."""

    def extend(self, other: Phase) -> None:
        """Add another round of the same phase."""
        self.latencies += other.latencies
        self.errors.update(other.errors)
        self.wall += other.wall
        self.hostile.update(other.hostile)
        self.spans += other.spans
        self.hostile_spans += other.hostile_spans

    @property
    def requests(self) -> int:
        return len(self.latencies)

    def row(self) -> dict[str, float]:
        return {
            "requests": self.requests,
            "errors": sum(self.errors.values()),
            "error_rate": sum(self.errors.values()) / max(1, self.requests),
            "p50_ms": percentile(self.latencies, 50) * 1e3,
            "p99_ms": percentile(self.latencies, 99) * 1e3,
            "req_per_s": self.requests / self.wall if self.wall else float("nan"),
        }


def innocent_error(response: httpx.Response | Exception) -> str | None:
    if isinstance(response, Exception):
        return type(response).__name__
    if response.status_code != 200:
        return f"HTTP {response.status_code}"
    body = response.json()
    if body.get("status") != "Success":
        reason = (body.get("agentenvs") or {}).get("message") or body.get("message") or ""
        return f"{body.get('status')}: {reason[:80]}"
    if (body.get("run_result") or {}).get("stdout") != INNOCENT_STDOUT:
        return "wrong stdout"
    return None


def execution_time(response: httpx.Response | Exception) -> float:
    """How long the code ran inside its worker (the rest of a latency is waiting)."""
    with contextlib.suppress(AttributeError, ValueError, TypeError):
        return float(response.json()["run_result"]["execution_time"])  # type: ignore[union-attr]
    return float("nan")


async def innocent_client(client: httpx.AsyncClient, url: str, n: int, phase: Phase) -> None:
    payload = {"code": INNOCENT_CODE, "language": "python", "run_timeout": 10}
    for _ in range(n):
        start = time.perf_counter()
        try:
            outcome: httpx.Response | Exception = await client.post(
                f"{url}/run_code", json=payload, timeout=120
            )
        except httpx.HTTPError as exc:
            outcome = exc
        end = time.perf_counter()
        phase.latencies.append(end - start)
        phase.spans.append((start, end, execution_time(outcome)))
        if (error := innocent_error(outcome)) is not None:
            phase.errors[error] += 1


async def hostile_client(
    client: httpx.AsyncClient, url: str, stop: asyncio.Event, phase: Phase
) -> None:
    while not stop.is_set():
        name = next(HOSTILE_ROTATION)
        payload = {"code": HOSTILE_PROGRAMS[name], "language": "python", "run_timeout": 2}
        start = time.perf_counter()
        try:
            response = await client.post(f"{url}/run_code", json=payload, timeout=120)
            status = (response.json().get("agentenvs") or {}).get("status", response.status_code)
        except (httpx.HTTPError, ValueError) as exc:
            status = type(exc).__name__
        phase.hostile[f"{name}:{status}"] += 1
        phase.hostile_spans.append((name, start, time.perf_counter()))


async def run_phase(url: str, n: int, *, hostile: bool) -> Phase:
    phase = Phase("hostile" if hostile else "quiet")
    limits = httpx.Limits(max_connections=INNOCENT_CLIENTS + 1)
    async with httpx.AsyncClient(limits=limits) as client:
        for _ in range(5):  # warm-up
            await client.post(f"{url}/run_code", json={"code": INNOCENT_CODE}, timeout=60)
        stop = asyncio.Event()
        enemy = asyncio.create_task(hostile_client(client, url, stop, phase)) if hostile else None
        start = time.perf_counter()
        await asyncio.gather(
            *(innocent_client(client, url, n, phase) for _ in range(INNOCENT_CLIENTS))
        )
        phase.wall = time.perf_counter() - start
        stop.set()
        if enemy is not None:
            await enemy
    return phase


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def server(args: argparse.Namespace, extra: tuple[str, ...] = (), script: str | None = None):
    """A fresh ``agentenvs sandbox serve`` (local): yields its URL and its pid. With
    ``script``, ``python -c script PORT`` serves instead (a benchmark's variant)."""
    port = free_port()
    argv = [sys.executable, "-m", "agentenvs.rollout.cli", "sandbox", "serve"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--backend", "local"]
    argv += ["--pool-size", str(args.pool_size), "--timeout", "10"]
    argv += ["--memory-mb", str(args.memory_mb), "--spare-workers", str(args.spare_workers)]
    argv += list(extra)
    if script is not None:
        argv = [sys.executable, "-c", script, str(port)]
    proc = subprocess.Popen(argv, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited with {proc.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/v1/ping", timeout=1).status_code == 200:
                    break
            time.sleep(0.2)
        yield url, proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


AFTERMATH_SECONDS = 1.0
"""An innocent request this soon after a hostile one ended counts as in its aftermath."""


def slow_requests_by_neighbour(quiet: Phase, hostile: Phase) -> Counter[str]:
    """The hostile phase's innocent requests slower than the quiet p99, by what the
    hostile client was doing meanwhile: ``during <program>`` (it overlapped the hostile
    request) or ``after <program>`` (it started within ``AFTERMATH_SECONDS`` of its end).
    Where the tail comes from, so that a fix can aim at it."""
    threshold = percentile(quiet.latencies, 99)
    blame: Counter[str] = Counter()
    for (start, end, _), latency in zip(hostile.spans, hostile.latencies, strict=True):
        if latency <= threshold:
            continue
        during = [n for n, s, e in hostile.hostile_spans if s < end and e > start]
        after = [n for n, s, e in hostile.hostile_spans if e <= start < e + AFTERMATH_SECONDS]
        if during:
            blame[f"during {during[-1]}" + (f" (after {after[-1]})" if after else "")] += 1
        elif after:
            blame[f"after {after[-1]}"] += 1
        else:
            blame["no hostile request near"] += 1
    return blame


def report(quiet: Phase, hostile: Phase, args: argparse.Namespace) -> None:
    q, h = quiet.row(), hostile.row()
    print(
        f"\nmachine: {platform.machine()} {os.cpu_count()} cores, {platform.platform()}, "
        f"Python {platform.python_version()}; --n {args.n} per innocent client, "
        f"--pool-size {args.pool_size}, --spare-workers {args.spare_workers}, "
        f"--memory-mb {args.memory_mb}, --rounds {args.rounds}, "
        f"load average at start {args.load_at_start}"
    )
    print("\n| phase | innocent requests | errors | error rate | p50 ms | p99 ms | req/s |")
    print("|---|---|---|---|---|---|---|")
    for name, row in (("quiet (3 innocent)", q), ("hostile (3 innocent + 1 hostile)", h)):
        print(
            f"| {name} | {row['requests']} | {row['errors']} | {row['error_rate']:.1%} | "
            f"{row['p50_ms']:.1f} | {row['p99_ms']:.1f} | {row['req_per_s']:.1f} |"
        )
    print(
        f"| **hostile / quiet** | | | | {h['p50_ms'] / q['p50_ms']:.2f}x | "
        f"**{h['p99_ms'] / q['p99_ms']:.2f}x** | {h['req_per_s'] / q['req_per_s']:.2f}x |"
    )
    target = h["errors"] == 0 and h["p99_ms"] <= 2 * q["p99_ms"]
    print(f"\ntarget (0 innocent errors, p99 within 2x): {'MET' if target else 'NOT MET'}")
    if hostile.errors or quiet.errors:
        print(
            "\ninnocent errors:", dict(quiet.errors), "(quiet)", dict(hostile.errors), "(hostile)"
        )
    print("\nhostile programs sent (name:outcome -> count):")
    for key, count in sorted(hostile.hostile.items()):
        print(f"- {key}: {count}")
    slow = slow_requests_by_neighbour(quiet, hostile)
    print(
        f"\nhostile-phase innocent requests slower than the quiet p99 "
        f"({sum(slow.values())}), by what the hostile client was running:"
    )
    for key, count in slow.most_common():
        print(f"- {key}: {count}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=500, help="requests per innocent client")
    parser.add_argument("--pool-size", type=int, default=2, help="the serve default")
    parser.add_argument("--memory-mb", type=int, default=512)
    parser.add_argument(
        "--spare-workers", type=int, default=1, help="standby workers (the serve default: 1)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="alternate quiet and hostile phases this many times (--n split between them), "
        "so that other jobs' load on a shared machine falls on both phases alike",
    )
    parser.add_argument(
        "--trace", help="write every request's (kind, start, end) as JSON here, for analysis"
    )
    args = parser.parse_args()
    args.load_at_start = f"{os.getloadavg()[0]:.1f}"
    quiet, hostile = Phase("quiet"), Phase("hostile")
    per_round = [args.n // args.rounds + (i < args.n % args.rounds) for i in range(args.rounds)]
    with server(args) as (url, _):
        for n in per_round:
            quiet.extend(asyncio.run(run_phase(url, n, hostile=False)))
            hostile.extend(asyncio.run(run_phase(url, n, hostile=True)))
    report(quiet, hostile, args)
    if args.trace:
        with open(args.trace, "w") as out:
            json.dump(
                {
                    phase.name: {"innocent": phase.spans, "hostile": phase.hostile_spans}
                    for phase in (quiet, hostile)
                },
                out,
            )


if __name__ == "__main__":
    main()
