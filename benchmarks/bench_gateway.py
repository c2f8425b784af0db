"""Latency the gateway adds per request, at 1, 64 and 256 concurrent sessions (issue 43).

The same policy is called two ways, side by side in one run, row by row:

* **direct**: the policy's ``__call__`` in this process, as the collector calls it;
* **gateway**: an OpenAI Chat Completions request over loopback HTTP to ``agentenvs
  gateway`` (a separate process, one uvicorn worker), which renders the conversation
  with the Qwen3 chat template, samples from the policy, parses the tool call from the
  sampled tokens, records the turn in its session's segment tree and answers.

The policy stands in for a model: it waits ``--delay`` seconds (the model's time) and
returns fixed real-vocabulary tokens (a tool call, then a final answer). Each session
plays ``--turns`` turns of a growing conversation (system prompt, three tools, each
turn's reply and tool result sent back: what a harness sends), so every request after
the first extends its session's segment. Added latency = gateway p50 - direct p50 at
the same concurrency (the target of the issue: <= 2 ms at 256 sessions on a quiet
machine). The gateway process's CPU time per request is measured too (``/proc``): it
is what the gateway costs whatever the load.

Two measures of what is added: client-observed (gateway p50 - direct p50: includes the
HTTP client's own time, in this process, on the same cores) and server-side, per request
(the time from its arrival to its last byte sent, less the policy's own time for it: what
the gateway itself adds to a harness's turn; its p50, p90 and p99 are reported). The
model's time varies (0.5-1.5x ``--delay``, seeded) and sessions start spread over one
turn, so they do not arrive in lockstep bursts as identical sleeps would make them.

Run: ``python benchmarks/bench_gateway.py [--sessions 1,64,256] [--turns 4] [--delay 0.5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

SYSTEM = "You are a careful software engineer. Use the tools to inspect and change files. " * 8
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name}: {text}",
            "parameters": {
                "type": "object",
                "properties": {arg: {"type": "string"}},
                "required": [arg],
            },
        },
    }
    for name, arg, text in (
        ("bash", "command", "run a shell command and return its output"),
        ("read_file", "path", "read a file and return its contents"),
        ("write_file", "path", "write a file"),
    )
]
OUTPUT = "calc.py\ntest_calc.py\nREADME.md\n" * 20
POLICY_TIME: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "policy_time", default=None
)
"""The server's request timer: the policy adds its own time to the request's holder."""


class DelayPolicy:
    """Waits ``delay`` seconds, then returns a tool call (a final answer once the context
    is long) as Qwen3 ids with their end-of-turn token. ``spent`` sums its own time."""

    def __init__(self, tokenizer, delay: float) -> None:
        from support.gateway_helpers import hermes_call, sampled_ids

        self.delay = delay
        self.spent = 0.0
        self.random = random.Random(0)
        self.call = sampled_ids(tokenizer, hermes_call("bash", {"command": "ls -la"}, "Looking."))
        self.final = sampled_ids(tokenizer, "Done: the files are listed.")

    async def __call__(self, observation, stop, *, max_tokens=None):
        from agentenvs.envs.types import TokensWithLogprobs

        started = time.perf_counter()
        # A model's turns vary: 0.5-1.5x the delay (seeded), so sessions do not stay in step.
        await asyncio.sleep(self.delay * self.random.uniform(0.5, 1.5))
        spent = time.perf_counter() - started
        self.spent += spent
        holder = POLICY_TIME.get()
        if holder is not None:
            holder[0] += spent
        tokens = self.call if len(observation) < 4000 else self.final
        return TokensWithLogprobs(list(tokens), [-0.1] * len(tokens), "stop")


# ---------------------------------------------------------------------------- the server


def serve(port: int, delay: float) -> None:
    from support.vocab import load_vocabulary

    from agentenvs.rollout.gateway.policy_gateway import GatewayOptions, PolicyGateway
    from agentenvs.rollout.gateway.serve import run_loop

    tokenizer = load_vocabulary("qwen3")
    policy = DelayPolicy(tokenizer, delay)
    gateway = PolicyGateway(policy, GatewayOptions(tokenizer=tokenizer))
    run_loop(serve_timed(gateway, policy, port))


async def serve_timed(gateway, policy: DelayPolicy, port: int) -> None:
    """The gateway's app, each request timed from its arrival to its last byte sent;
    ``GET /bench/stats`` answers the totals (handled seconds, policy seconds, count)."""
    import uvicorn
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from agentenvs.rollout.gateway.serve import bind, gateway_app

    totals = {"handled": 0.0, "policy": 0.0, "requests": 0}
    added: list[float] = []

    async def stats(request):
        since = int(request.query_params.get("since", "0"))
        return JSONResponse({**totals, "policy": policy.spent, "added": added[since:]})

    inner = gateway_app(gateway)
    inner.router.routes.append(Route("/bench/stats", stats))

    async def app(scope, receive, send):
        if scope["type"] != "http" or scope["path"] == "/bench/stats":
            return await inner(scope, receive, send)
        holder = [0.0]
        token = POLICY_TIME.set(holder)
        started = time.perf_counter()
        try:
            await inner(scope, receive, send)
        finally:
            POLICY_TIME.reset(token)
        handled = time.perf_counter() - started
        totals["handled"] += handled
        totals["requests"] += 1
        added.append(handled - holder[0])

    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=75
    )
    await uvicorn.Server(config).serve(sockets=[bind("127.0.0.1", port)])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------- the client


async def gateway_row(
    url: str, sessions: int, turns: int, tag: str, stagger: float = 0.0
) -> list[float]:
    """Each session its own client with one connection, as each harness process has:
    one pool of hundreds of connections costs httpx time per request that grows with the
    pool (it walks every connection), which is the client's cost, not the gateway's. The
    clients are made before the clock starts and without TLS set-up (loading the
    certificate store costs ~0.1 s of CPU per client, which would stall every session)."""
    import httpx

    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    clients = [httpx.AsyncClient(limits=limits, timeout=600, verify=False) for _ in range(sessions)]

    async def episode(index: int, client: httpx.AsyncClient) -> list[float]:
        await asyncio.sleep(stagger * index / sessions)  # sessions start spread over a turn
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Task {index}: list the files."},
        ]
        times = []
        for _ in range(turns):
            body = {"model": "m", "messages": messages, "tools": TOOLS}
            started = time.perf_counter()
            answer = await client.post(f"{url}/s/{tag}-{index}/v1/chat/completions", json=body)
            times.append(time.perf_counter() - started)
            message = answer.json()["choices"][0]["message"]
            messages.append({k: v for k, v in message.items() if v is not None})
            for call in message.get("tool_calls") or []:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": OUTPUT})
        return times

    try:
        rows = await asyncio.gather(*(episode(i, c) for i, c in enumerate(clients)))
    finally:
        for client in clients:
            await client.aclose()
    return [t for row in rows for t in row]


async def direct_row(
    policy: DelayPolicy, prompt: list[int], sessions: int, turns: int, stagger: float = 0.0
) -> list[float]:
    async def episode(index: int) -> list[float]:
        await asyncio.sleep(stagger * index / sessions)  # as the gateway row's sessions
        times = []
        for _ in range(turns):
            started = time.perf_counter()
            await policy(prompt, ["<|im_end|>"], max_tokens=2048)
            times.append(time.perf_counter() - started)
        return times

    rows = await asyncio.gather(*(episode(i) for i in range(sessions)))
    return [t for row in rows for t in row]


def server_stats(url: str, since: int = 0) -> dict:
    import httpx

    return httpx.get(f"{url}/bench/stats", params={"since": since}, timeout=30).json()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def wait_ready(url: str, process: subprocess.Popen, timeout: float = 300) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the gateway process died ({process.returncode})")
        try:
            httpx.get(f"{url}/v1/models", timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit("the gateway did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", default="1,64,256")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.5)
    parser.add_argument("--port", type=int, default=18743)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.port, args.delay)
        return
    from support.vocab import load_vocabulary

    tokenizer = load_vocabulary("qwen3")
    policy = DelayPolicy(tokenizer, args.delay)
    prompt = tokenizer.apply_chat_template(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Task 0"}],
        tools=TOOLS, add_generation_prompt=True, tokenize=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{args.port}"
    command = [
        sys.executable,
        __file__,
        "--serve",
        "--port",
        str(args.port),
        "--delay",
        str(args.delay),
    ]
    process = subprocess.Popen(command)
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
          f"load {os.getloadavg()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")  # fmt: skip
    try:
        wait_ready(url, process)
        asyncio.run(gateway_row(url, 2, 2, "warm"))
        print(f"policy delay {args.delay * 1000:.0f} ms, {args.turns} turns per session")
        print(
            "| sessions | requests | direct p50 | through the gateway p50 (p99) | added p50 "
            "client-observed | **added p50 (p90, p99) server-side** | gateway CPU/request |"
        )
        print("|---|---|---|---|---|---|---|")
        for sessions in (int(s) for s in args.sessions.split(",")):
            stagger = args.delay  # sessions start spread over one model turn
            direct = asyncio.run(direct_row(policy, prompt, sessions, args.turns, stagger))
            seen, cpu_before = len(server_stats(url)["added"]), cpu_seconds(process.pid)
            through = asyncio.run(gateway_row(url, sessions, args.turns, f"s{sessions}", stagger))
            cpu = (cpu_seconds(process.pid) - cpu_before) / len(through)
            added = server_stats(url, seen)["added"]
            d50, g50 = statistics.median(direct), statistics.median(through)
            a50, a90, a99 = (percentile(added, q) * 1000 for q in (0.5, 0.9, 0.99))
            print(
                f"| {sessions} | {len(through)} | {d50 * 1000:.1f} ms | {g50 * 1000:.1f} ms "
                f"({percentile(through, 0.99) * 1000:.1f}) | {(g50 - d50) * 1000:.2f} ms | "
                f"**{a50:.2f} ms** ({a90:.2f}, {a99:.2f}) | {cpu * 1000:.2f} ms |",
                flush=True,
            )
    finally:
        process.terminate()
        process.wait(timeout=30)
    print(f"# load at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
