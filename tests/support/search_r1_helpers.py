"""Helpers for the Search-R1 tests: a scripted driver that records which context tokens
were sampled, and a retrieval server started in a subprocess on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from agentenvs.envs.rendered_env import RenderedEnv
from agentenvs.envs.types import StepResult


@dataclass
class Episode:
    reward: float = 0.0
    steps: list[StepResult] = field(default_factory=list)
    context: list[int] = field(default_factory=list)
    sampled: list[bool] = field(default_factory=list)  # per context token: did the policy emit it
    prompt_len: int = 0
    stops: list[list[str]] = field(default_factory=list)  # stop condition before each action

    @property
    def final(self) -> StepResult:
        return self.steps[-1]


async def drive(env: RenderedEnv, variant: str = "oracle", max_steps: int = 50) -> Episode:
    """Run the env's own scripted policy, keeping the token context and its sampled mask."""
    ob, stop = await env.initial_observation()
    ep = Episode(context=list(ob), sampled=[False] * len(ob), prompt_len=len(ob))
    for _ in range(max_steps):
        ep.stops.append(list(stop))
        tokens, stop_reason = env.scripted_action(variant)
        ep.context += tokens
        ep.sampled += [True] * len(tokens)
        result = await env.step(tokens, extra={"stop_reason": stop_reason})
        ep.steps.append(result)
        ep.reward += result.reward
        if result.episode_done:
            return ep
        # Token-in/token-out: the next observation extends what the policy saw and sampled.
        assert result.next_observation[: len(ep.context)] == ep.context
        appended = result.next_observation[len(ep.context) :]
        ep.context += appended
        ep.sampled += [False] * len(appended)
        ob, stop = result.next_observation, result.next_stop_condition
    raise AssertionError("episode did not end")


def masked_spans(ep: Episode) -> list[tuple[int, int]]:
    """Maximal runs of env-written tokens after the prompt."""
    spans, start = [], None
    for i in range(ep.prompt_len, len(ep.context)):
        if not ep.sampled[i] and start is None:
            start = i
        if ep.sampled[i] and start is not None:
            spans.append((start, i))
            start = None
    if start is not None:
        spans.append((start, len(ep.context)))
    return spans


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


SLOW_SERVER = """
import asyncio, sys, uvicorn
from agentenvs.envs.search_r1.retrievers import make_retriever, RetrieverConfig
from agentenvs.envs.search_r1.server import create_app
port, delay, slow_requests = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
config = RetrieverConfig()
app = create_app(make_retriever(config), config)
seen = {"n": 0}

@app.middleware("http")
async def slow_down(request, call_next):
    # Fault injection for the tests: the first `slow_requests` searches answer late.
    if request.url.path == "/retrieve":
        seen["n"] += 1
        if seen["n"] <= slow_requests:
            await asyncio.sleep(delay)
    return await call_next(request)

uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
"""


@dataclass
class Server:
    process: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/retrieve"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def start_server(args: list[str], port: int, log: Path) -> Server:
    env = dict(os.environ)
    handle = log.open("wb")
    process = subprocess.Popen(
        [sys.executable, *args], stdout=handle, stderr=subprocess.STDOUT, env=env
    )
    server = Server(process, port)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited early:\n{log.read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"server did not come up:\n{log.read_text()}")


def start_cli_server(port: int, log: Path, *extra: str) -> Server:
    args = ["-m", "agentenvs.envs.search_r1.cli", "serve", "--port", str(port), *extra]
    return start_server(args, port, log)


def start_slow_server(port: int, log: Path, delay: float, slow_requests: int) -> Server:
    return start_server(["-c", SLOW_SERVER, str(port), str(delay), str(slow_requests)], port, log)
