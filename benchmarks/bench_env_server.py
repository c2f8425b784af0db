"""A remote env's cost per step over the same env in process, and how many sessions
one env server process holds before p99 step latency doubles.

    python benchmarks/bench_env_server.py [--episodes 40] [--seconds 4]
    python benchmarks/bench_env_server.py --fast [--seconds 4]   # issue 44's targets only
    python benchmarks/bench_env_server.py --compare DIR          # this tree against DIR's

Part 0 (``--fast``, issue 44): guess_number steps per second of one server process, with
``--concurrency`` episodes stepping back to back from one client process on the same
cores, over the WebSocket fast path (``/v1/ws``, calls batched per frame) and over HTTP
(a request per step), beside the same loop in process, interleaved ``--repeats`` times;
the per-step overhead (sequential, one episode: each step a round trip, interleaved
rounds); and the probe's p99 with 4,096 and 10,000 sessions held open against its p99
with none. Wall rates move with the machine's load; **CPU time per step** does much
less, so each row also gives the server process's CPU seconds per step (every thread,
from ``/proc/<pid>/task/*/schedstat``), this client process's, and the in-process
loop's, and what two idle cores would allow at those CPU costs
(``two_core_steps_per_s = min(1 / server, 2 / (server + client))``: the server's one
event loop uses at most one core).

The one-episode row runs twice: back to back, and with ``--pause`` (1 ms) slept before
every step on both sides, as a policy's sampling does. A process woken for each step
runs it colder (caches, the core's state) than a hot loop: guess_number's step costs
about 0.19 ms of CPU back to back and 0.25-0.32 ms after a 0.3-1 ms sleep, in process.
A server is woken for every step, so the back-to-back row charges that to the server.

``--compare DIR`` (a checkout of another commit, e.g. ``git worktree add /tmp/before
HEAD~1``): DIR's server and client beside this tree's, each row (one episode, paused,
``--concurrency`` episodes, ``collect``) in a fresh client process importing that tree,
the trees interleaved round by round (``--compare-rounds``), medians at the end:
before/after in one run.

Part 1, per step: the scripted oracle plays ``--episodes`` episodes of guess_number
and of ALFWorld (the shipped games) in this process (``config.make_env``) and through
``RemoteEnv`` against ``agentenvs serve`` in a subprocess on loopback, interleaved
episode by episode so machine noise hits both sides. Only ``step()`` is timed (the
oracle's answer is asked before the clock starts). Reported: mean, p50 and p99 step
time of each, and the remote overhead (mean remote - mean local).

Part 2, sessions: against one fresh server process, ``S`` groups are opened (one
episode each, initial observation taken) and held; then (a) *held*: one probe
episode steps for ``--seconds`` while the S others sit idle mid-episode, and
(b) *active* (S up to ``--max-active``): all S step back to back for ``--seconds``.
After each S the probe runs again with no session held: the held p99 is compared
with that one (the machine's load drifts more than a table lookup costs). S doubles
from 1 until the ratio exceeds 2 twice in a row, or ``--max-sessions``. The load
generator shares the machine's cores with the server, so (b) measures the pair.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import httpx
from support.env_servers import ProcessServer

from agentenvs.envs.registry import make
from agentenvs.envs.remote import RemoteDataset
from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.collector import collect
from agentenvs.rollout.collect.options import CollectOptions
from agentenvs.rollout.tokenizer import load_tokenizer

ENVS = {"guess_number": {}, "alfworld": {"data": "shipped"}}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def play(env, times: list[float]) -> None:
    await env.initial_observation()
    while True:
        answer = env.scripted_action("oracle")
        if asyncio.iscoroutine(answer):
            answer = await answer
        tokens, stop = answer
        started = time.perf_counter()
        result = await env.step(tokens, extra={"stop_reason": stop})
        times.append(time.perf_counter() - started)
        if result.episode_done:
            return


async def per_step(url: str, tokenizer, episodes: int) -> dict[str, dict[str, float]]:
    rows = {}
    for name, config in ENVS.items():
        made = make(name, **config)
        tasks = made.num_tasks("train")
        remote = RemoteDataset.open(url, name, group_size=1, config=config, n_groups=tasks,
                                    tokenizer=tokenizer)  # fmt: skip
        local_times: list[float] = []
        remote_times: list[float] = []
        for episode in range(episodes):
            env = made.make_env(episode % tasks, tokenizer)
            await play(env, local_times)
            await env.close()
            builder = remote.builders[episode % tasks]
            (renv,) = await builder.make_envs()
            await play(renv, remote_times)
            await builder.cleanup()
        local_mean = statistics.mean(local_times) * 1e3
        remote_mean = statistics.mean(remote_times) * 1e3
        rows[name] = {
            "steps": len(local_times),
            "local_mean_ms": local_mean,
            "local_p50_ms": pct(local_times, 0.5) * 1e3,
            "local_p99_ms": pct(local_times, 0.99) * 1e3,
            "remote_mean_ms": remote_mean,
            "remote_p50_ms": pct(remote_times, 0.5) * 1e3,
            "remote_p99_ms": pct(remote_times, 0.99) * 1e3,
            "overhead_ms": remote_mean - local_mean,
        }
    return rows


async def hold(builders, count: int):
    """Open ``count`` groups mid-episode and let go of their connections: a held
    session costs the server its state, not a socket."""
    opened = []
    for builder in builders[:count]:
        (env,) = await builder.make_envs()
        await env.initial_observation()
        await env.connection.aclose()
        opened.append((builder, env))
    return opened


async def step_for(env, builder, seconds: float, times: list[float]) -> None:
    """Step ``env`` back to back; a finished episode is replaced by a fresh one."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        answer = await env.scripted_action("oracle")
        started = time.perf_counter()
        result = await env.step(answer[0], extra={"stop_reason": answer[1]})
        times.append(time.perf_counter() - started)
        if result.episode_done:
            await builder.cleanup()
            (env,) = await builder.make_envs()
            await env.initial_observation()


async def probe(builder, seconds: float) -> list[float]:
    times: list[float] = []
    (env,) = await builder.make_envs()
    await env.initial_observation()
    await step_for(env, builder, seconds, times)
    await builder.cleanup()
    return times


async def sessions(
    url: str, tokenizer, seconds: float, max_sessions: int, max_active: int
) -> list[dict]:
    """Per S: the probe's p99 with S sessions held, then again with none (the baseline
    of that moment: the machine's load drifts more than any table lookup costs)."""
    dataset = RemoteDataset.open(url, "guess_number", group_size=1, n_groups=max_sessions + 1,
                                 tokenizer=tokenizer)  # fmt: skip
    builders = dataset.builders
    await probe(builders[0], 1.0)  # warm-up: imports, caches, connection set-up
    rows: list[dict] = []
    base_active = None
    count = 1
    over = 0
    while count <= max_sessions:
        opened = await hold(builders[1:], count)
        held = await probe(builders[0], seconds)
        row = {"sessions": count, "held_p50_ms": pct(held, 0.5) * 1e3,
               "held_p99_ms": pct(held, 0.99) * 1e3}  # fmt: skip
        if count <= max_active:
            active: list[float] = []
            await asyncio.gather(*(step_for(e, b, seconds, active) for b, e in opened))
            row["active_p99_ms"] = pct(active, 0.99) * 1e3
            row["active_steps_per_s"] = len(active) / seconds
            base_active = base_active or row["active_p99_ms"]
            row["active_x"] = row["active_p99_ms"] / base_active
        for builder, _ in opened:
            await builder.cleanup()
        alone = await probe(builders[0], seconds)
        row["alone_p99_ms"] = pct(alone, 0.99) * 1e3
        row["held_x"] = row["held_p99_ms"] / row["alone_p99_ms"]
        rows.append(row)
        print({k: round(v, 2) for k, v in row.items()}, flush=True)
        over = over + 1 if row["held_x"] > 2 else 0
        if over == 2:  # twice in a row: not one noisy window
            break
        count *= 2
    return rows


FIXED_GUESS = "<guess>50</guess>"
LONG = {"limits": {"max_turns": 30}}


def server_cpu(pid: int) -> float:
    """CPU seconds of every thread of process ``pid`` (``schedstat``: nanoseconds, so a
    short window is measured exactly; ``/proc/<pid>/stat`` counts 10 ms ticks)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


@dataclass
class Meter:
    """Wall time and CPU time (the server process's, this client process's) of a window."""

    pid: int | None
    wall: float = 0.0
    server: float = 0.0
    client: float = 0.0
    steps: int = 0

    @contextlib.contextmanager
    def window(self) -> Iterator[None]:
        server = server_cpu(self.pid) if self.pid else 0.0
        client, wall = time.process_time(), time.perf_counter()
        try:
            yield
        finally:
            self.wall += time.perf_counter() - wall
            self.client += time.process_time() - client
            if self.pid:
                self.server += server_cpu(self.pid) - server

    def row(self) -> dict[str, float]:
        n = max(self.steps, 1)
        row = {"steps": self.steps, "steps_per_s": self.steps / max(self.wall, 1e-9),
               "client_cpu_ms": self.client / n * 1e3}  # fmt: skip
        if self.pid:
            row["server_cpu_ms"] = self.server / n * 1e3
            row["cpu_ms"] = row["server_cpu_ms"] + row["client_cpu_ms"]
            # Two cores: the server's one event loop is one core's work at most, and the
            # pair shares two; what the CPU time per step allows if nothing else ran.
            row["two_core_steps_per_s"] = min(1e3 / row["server_cpu_ms"], 2e3 / row["cpu_ms"])
        else:
            row["cpu_ms"] = row["client_cpu_ms"]
        return row


async def _fixed_steps(
    env, action: list[int], seconds: float, times: list[float], pause: float = 0.0
) -> int:
    """Step ``env`` with one fixed wrong guess until ``seconds`` pass or it ends (only the
    stepping is timed: opening episodes is not a step). ``pause``: seconds the loop sleeps
    before each step, as it does while a policy samples the next action."""
    deadline = time.monotonic() + seconds
    done = 0
    while time.monotonic() < deadline:
        if pause:
            await asyncio.sleep(pause)
        started = time.perf_counter()
        result = await env.step(action, extra={"stop_reason": "stop"})
        times.append(time.perf_counter() - started)
        done += 1
        if result.episode_done:
            break
    return done


async def local_rate(tokenizer, concurrency: int, seconds: float) -> dict[str, float]:
    """``concurrency`` episodes in this process, back to back: the same loop as remote."""
    made = make("guess_number", **LONG)
    action = tokenizer.encode(FIXED_GUESS, add_special_tokens=False)
    meter = Meter(None)
    while meter.wall < seconds:
        envs = [made.make_env(i % 64, tokenizer) for i in range(concurrency)]
        for env in envs:
            await env.initial_observation()
        with meter.window():
            counts = await asyncio.gather(*(_fixed_steps(e, action, seconds, []) for e in envs))
        meter.steps += sum(counts)
    return meter.row()


async def remote_rate(url, pid, tokenizer, concurrency: int, seconds: float, transport: str):
    """The same loop against the server: ``concurrency`` groups of one episode each."""
    dataset = RemoteDataset.open(url, "guess_number", group_size=1, config=LONG,
                                 n_groups=concurrency, tokenizer=tokenizer)  # fmt: skip
    action = tokenizer.encode(FIXED_GUESS, add_special_tokens=False)
    meter = Meter(pid)
    times: list[float] = []
    while meter.wall < seconds:
        envs = []
        for builder in dataset.builders:
            (env,) = await builder.make_envs()
            env.connection.transport = transport
            envs.append(env)
        await asyncio.gather(*(e.initial_observation() for e in envs))
        with meter.window():
            counts = await asyncio.gather(*(_fixed_steps(e, action, seconds, times) for e in envs))
        meter.steps += sum(counts)
        await asyncio.gather(*(b.cleanup() for b in dataset.builders))
    return {**meter.row(), "p99_ms": pct(times, 0.99) * 1e3}


async def overhead(
    url, pid, tokenizer, rounds: int, seconds: float, transport: str, pause: float = 0.0
) -> dict:
    """One episode at a time (each step a round trip, nothing to batch), remote and in
    process interleaved round by round: wall and CPU time per step of each. With
    ``pause``, both loops sleep that long before each step (a policy's sampling time):
    a process woken for each step runs it colder than a hot loop does, in process too."""
    made = make("guess_number", **LONG)
    action = tokenizer.encode(FIXED_GUESS, add_special_tokens=False)
    dataset = RemoteDataset.open(url, "guess_number", group_size=1, config=LONG, n_groups=1,
                                 tokenizer=tokenizer)  # fmt: skip
    builder = dataset.builders[0]
    local, remote = Meter(None), Meter(pid)
    local_times: list[float] = []
    remote_times: list[float] = []
    for _ in range(rounds):
        env = made.make_env(0, tokenizer)
        await env.initial_observation()
        with local.window():
            local.steps += await _fixed_steps(env, action, seconds, local_times, pause)
        (renv,) = await builder.make_envs()
        renv.connection.transport = transport
        await renv.initial_observation()
        with remote.window():
            remote.steps += await _fixed_steps(renv, action, seconds, remote_times, pause)
        await builder.cleanup()
    mine, theirs = local.row(), remote.row()
    return {"local_mean_ms": statistics.mean(local_times) * 1e3,
            "remote_mean_ms": statistics.mean(remote_times) * 1e3,
            "remote_p99_ms": pct(remote_times, 0.99) * 1e3,
            "wall_overhead_ms": (statistics.mean(remote_times) - statistics.mean(local_times)) * 1e3,
            "local_cpu_ms": mine["cpu_ms"], "server_cpu_ms": theirs["server_cpu_ms"],
            "client_cpu_ms": theirs["client_cpu_ms"],
            "cpu_overhead_ms": theirs["cpu_ms"] - mine["cpu_ms"]}  # fmt: skip


async def held(url, pid, tokenizer, counts: list[int], seconds: float) -> list[dict]:
    """The probe's step p99 (WebSocket) with ``count`` sessions held open, and alone."""
    most = max(counts)
    dataset = RemoteDataset.open(url, "guess_number", group_size=1, n_groups=most + 1,
                                 tokenizer=tokenizer)  # fmt: skip
    probe_builder, others = dataset.builders[0], dataset.builders[1:]
    action = tokenizer.encode(FIXED_GUESS, add_special_tokens=False)

    async def probe() -> tuple[list[float], Meter]:
        times: list[float] = []
        meter = Meter(pid)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            (env,) = await probe_builder.make_envs()
            await env.initial_observation()
            with meter.window():
                meter.steps += await _fixed_steps(env, action, deadline - time.monotonic(), times)
            await probe_builder.cleanup()
        return times, meter

    await probe()  # warm-up
    rows = []
    for count in counts:
        opened, started = [], time.monotonic()
        for first in range(0, count, 256):  # open them 256 at a time
            batch = others[first : min(count, first + 256)]
            envs = await asyncio.gather(*(b.make_envs() for b in batch))
            await asyncio.gather(*(e.initial_observation() for (e,) in envs))
            # A held session costs the server its state, not a connection of its own.
            await asyncio.gather(*(e.connection.aclose() for (e,) in envs))
            opened += batch
        opening = time.monotonic() - started
        holding = httpx.get(f"{url}/health").json()["groups"]
        with_held, held_meter = await probe()
        for first in range(0, len(opened), 256):
            await asyncio.gather(*(b.cleanup() for b in opened[first : first + 256]))
        alone, alone_meter = await probe()
        row = {"sessions": count, "server_holds": holding, "opened_in_s": opening,
               "held_p50_ms": pct(with_held, 0.5) * 1e3, "held_p99_ms": pct(with_held, 0.99) * 1e3,
               "alone_p99_ms": pct(alone, 0.99) * 1e3,
               "held_server_cpu_ms": held_meter.row()["server_cpu_ms"],
               "alone_server_cpu_ms": alone_meter.row()["server_cpu_ms"]}  # fmt: skip
        row["held_x"] = row["held_p99_ms"] / row["alone_p99_ms"]
        rows.append(row)
        print("held", {k: round(v, 3) for k, v in row.items()}, flush=True)
    return rows


class FixedGuess:
    """A policy that always guesses 50 (every episode runs to ``max_turns``): what a
    model costs is left out, the collector's and the env's work stays."""

    def __init__(self, tokenizer) -> None:
        self.tokens = tokenizer.encode(FIXED_GUESS + "<|im_end|>", add_special_tokens=False)

    async def __call__(self, ob, stop, *, max_tokens=None) -> TokensWithLogprobs:
        return TokensWithLogprobs(list(self.tokens), [-0.1] * len(self.tokens), "eos")


async def rollout_rate(url, pid, tokenizer, groups: int, concurrency: int) -> dict:
    """``collect`` itself, in process and against the server: groups of 4 guess_number
    episodes of 8 turns, each group opened, played, scored and closed (the per-group
    cost, a group's HTTP calls, counts here as it does in a run)."""
    config = {"limits": {"max_turns": 8}}
    local = make("guess_number", **config).dataset(tokenizer, group_size=4, n_groups=groups)
    remote = RemoteDataset.open(url, "guess_number", group_size=4, config=config,
                                n_groups=groups, tokenizer=tokenizer)  # fmt: skip
    rows = {}
    for name, builders, meter in (
        ("in process", [b for i in range(len(local)) for b in local.get_batch(i)], Meter(None)),
        ("remote", remote.builders, Meter(pid)),
    ):
        with meter.window():
            result = await collect(builders, FixedGuess(tokenizer),
                                   CollectOptions(concurrency=concurrency, progress=False))  # fmt: skip
        assert not result.failed, [r.error for r in result.failed]
        meter.steps = sum(len(t.transitions) for r in result.ok for t in r.group.trajectories)
        rows[name] = {**meter.row(), "groups_per_s": groups / meter.wall}
    return rows


def _show(label: str, row: dict[str, float]) -> None:
    print(label, {k: round(v, 3) for k, v in row.items()}, flush=True)


def fast_targets(args) -> None:
    tokenizer = load_tokenizer("builtin")
    counts = [int(c) for c in args.held.split(",") if c]
    limits = ["--max-groups", str(max(counts, default=0) + 64), "--idle-timeout", "7200"]
    server = ProcessServer(["guess_number"], extra=limits).start()
    assert server.process is not None
    pid = server.process.pid
    try:
        for transport in args.transports.split(","):
            for _ in range(args.repeats):  # remote and in process interleaved
                remote = asyncio.run(remote_rate(server.url, pid, tokenizer, args.concurrency,
                                                 args.seconds, transport))  # fmt: skip
                _show(f"{transport} x{args.concurrency}:", remote)
                _show("in process:", asyncio.run(local_rate(tokenizer, args.concurrency,
                                                            args.seconds)))  # fmt: skip
        for _ in range(args.repeats):
            rows = asyncio.run(rollout_rate(server.url, pid, tokenizer, 256, args.concurrency))
            for name, row in rows.items():
                _show(f"collect, {name}:", row)
        for transport in args.transports.split(","):
            row = asyncio.run(overhead(server.url, pid, tokenizer, 5, args.seconds / 4, transport))
            _show(f"{transport} one episode, per step:", row)
            row = asyncio.run(overhead(server.url, pid, tokenizer, 5, args.seconds / 4, transport,
                                       args.pause))  # fmt: skip
            _show(f"{transport} one episode, {args.pause * 1e3:g} ms pause, per step:", row)
        if counts:
            asyncio.run(held(server.url, pid, tokenizer, counts, args.seconds))
    finally:
        server.stop()


CHILD_ROWS = ("overhead", "overhead_pause", "rate", "collect")


def child_row(args) -> None:
    """One row against the server at ``--child-url`` (pid ``--child-pid``), printed as a
    JSON line: run by :func:`compare_trees` in a process importing either tree."""
    tokenizer = load_tokenizer("builtin")
    url, pid = args.child_url, args.child_pid
    if args.child == "rate":
        row = asyncio.run(remote_rate(url, pid, tokenizer, args.concurrency, args.seconds, "ws"))
    elif args.child == "collect":
        row = asyncio.run(rollout_rate(url, pid, tokenizer, 256, args.concurrency))["remote"]
    else:
        pause = args.pause if args.child == "overhead_pause" else 0.0
        row = asyncio.run(overhead(url, pid, tokenizer, 25, 60.0, "ws", pause))
    print("ROW " + json.dumps(row), flush=True)


def tree_path(tree: Path) -> str:
    """A ``PYTHONPATH`` entry under which ``agentenvs.*`` imports from ``tree`` (a checkout
    of another commit), ahead of this checkout's editable install."""
    shim = Path(tempfile.mkdtemp(prefix="bench-tree-")) / "agentenvs"
    shim.mkdir()
    for part in ("envs", "rollout", "sandbox"):
        (shim / part).symlink_to(tree.resolve() / part)
    return str(shim.parent)


def compare_trees(args) -> None:
    """This tree against ``--compare DIR`` (say ``git worktree add /tmp/before <commit>``),
    each tree's server and client together: the one-episode rows (and the
    ``--concurrency`` rate), the two trees interleaved round by round, in one run."""
    trees = {"before": tree_path(Path(args.compare)), "after": None}
    servers: dict[str, ProcessServer] = {}
    environs = {}
    for name, path in trees.items():
        environ = dict(os.environ)
        if path:
            environ["PYTHONPATH"] = os.pathsep.join(filter(None, [path, environ.get("PYTHONPATH")]))
        environs[name] = environ
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(environ)  # ProcessServer passes this process's environment
        try:
            servers[name] = ProcessServer(["guess_number"]).start()
        finally:
            os.environ.clear()
            os.environ.update(saved)
    rows: dict[tuple[str, str], list[dict]] = {}
    try:
        for round_ in range(args.compare_rounds):
            order = list(servers) if round_ % 2 == 0 else list(servers)[::-1]
            for row_name in args.compare_rows.split(","):
                for name in order:
                    server = servers[name]
                    assert server.process is not None
                    command = [sys.executable, __file__, "--child", row_name, "--child-url",
                               server.url, "--child-pid", str(server.process.pid), "--pause",
                               str(args.pause), "--concurrency", str(args.concurrency),
                               "--seconds", str(args.seconds)]  # fmt: skip
                    out = subprocess.run(command, env=environs[name], capture_output=True,
                                         text=True, check=True).stdout  # fmt: skip
                    row = json.loads(out.split("ROW ", 1)[1])
                    rows.setdefault((row_name, name), []).append(row)
                    _show(f"{row_name} {name}:", row)
    finally:
        for server in servers.values():
            server.stop()
    print("medians over", args.compare_rounds, "rounds:")
    for (row_name, name), found in rows.items():
        keys = [k for k in found[0] if isinstance(found[0][k], int | float)]
        _show(f"{row_name} {name}:", {k: statistics.median(r[k] for r in found) for k in keys})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--max-sessions", type=int, default=4096)
    parser.add_argument("--max-active", type=int, default=64)
    parser.add_argument("--fast", action="store_true", help="issue 44's targets only")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--held", default="4096,10000", help="held-session counts ('' none)")
    parser.add_argument("--transports", default="ws,http")
    parser.add_argument("--repeats", type=int, default=2, help="--fast rate rows per transport")
    parser.add_argument("--pause", type=float, default=0.001,
                        help="seconds before each step in the paused one-episode row")  # fmt: skip
    parser.add_argument("--compare", metavar="DIR",
                        help="a checkout of another commit: its server and client beside this tree's")  # fmt: skip
    parser.add_argument("--compare-rounds", type=int, default=6)
    parser.add_argument("--compare-rows", default="overhead,overhead_pause,rate,collect")
    parser.add_argument("--child", choices=CHILD_ROWS, help=argparse.SUPPRESS)
    parser.add_argument("--child-url", help=argparse.SUPPRESS)
    parser.add_argument("--child-pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_row(args)
        return
    if args.compare:
        print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
        compare_trees(args)
        print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
        return
    tokenizer = load_tokenizer("builtin")
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print("cpus:", os.cpu_count())
    if args.fast:
        fast_targets(args)
        print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
        return
    server = ProcessServer(list(ENVS), extra=["--max-groups", str(args.max_sessions + 8)]).start()
    try:
        for name, row in asyncio.run(per_step(server.url, tokenizer, args.episodes)).items():
            print(name, {k: round(v, 3) for k, v in row.items()}, flush=True)
    finally:
        server.stop()
    server = ProcessServer(["guess_number"], extra=["--max-groups", str(args.max_sessions + 8)])
    server.start()
    try:
        asyncio.run(
            sessions(server.url, tokenizer, args.seconds, args.max_sessions, args.max_active)
        )
    finally:
        server.stop()
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
