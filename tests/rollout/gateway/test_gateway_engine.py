"""The engine path: ``agentenvs gateway`` (the command, in a subprocess) in front of the
suite's real vLLM server (CPU build, the tiny model), driven by the ``openai`` SDK.

The tiny random model writes no usable tool call, so this is about the tokens: two turns
of one episode (the second sends the first reply back with a new user message, so it
extends the first), plain and streamed, the episode finished into a store, and the store
passing ``check`` with every sampled token delivered and vLLM's own logprobs recorded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from support.vllm_server import SERVED_NAME, vllm_server  # noqa: F401  (the session fixture)

from agentenvs.envs.harness.segments import START_LOG
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.inspect.check import check_file
from agentenvs.rollout.tokenizer import load_tokenizer

pytestmark = pytest.mark.services  # starts the real vLLM server


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_gateway_command_serves_vllm_and_stores_a_checked_episode(
    vllm_server,  # noqa: F811
    tmp_path: Path,
) -> None:
    import openai

    port = _free_port()
    store = tmp_path / "episodes.jsonl"
    command = [
        sys.executable, "-m", "agentenvs.rollout.cli", "gateway", "--policy", "openai",
        "--policy-opt", f"url={vllm_server.url}", "--policy-opt", f"model={SERVED_NAME}",
        "--tokenizer", str(vllm_server.model_dir), "--port", str(port), "--out", str(store),
        "--max-tokens", "12",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{base}/v1/models", timeout=2)
                break
            except httpx.HTTPError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the gateway did not start: {process.stdout.read()}")
                time.sleep(0.3)
        client = openai.OpenAI(base_url=f"{base}/s/episode/v1", api_key="unused")
        messages = [{"role": "user", "content": "Say something."}]
        first = client.chat.completions.create(model=SERVED_NAME, messages=messages)
        assert first.usage.completion_tokens >= 1
        messages += [
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "And more."},
        ]
        streamed = client.chat.completions.create(model=SERVED_NAME, messages=messages, stream=True)
        assert [c for c in streamed if c.choices and c.choices[0].finish_reason]
        finished = httpx.post(f"{base}/s/episode/finish", json={"reward": 1.0}, timeout=30)
        assert finished.json() == {"key": "episode", "turns": 2, "reward": 1.0}
    finally:
        process.terminate()
        process.wait(timeout=30)
    (record,) = list(TrajectoryStore(store).read())
    transitions = record.group.trajectories[0].transitions
    assert [t.logs[START_LOG] for t in transitions] == ["first", "extend"]
    assert all(t.ac.logprobs and len(t.ac.logprobs) == len(t.ac.tokens) for t in transitions)
    assert record.provenance["policy"]["model"] == SERVED_NAME
    report = check_file(store, tokenizer=load_tokenizer(str(vllm_server.model_dir)))
    gateway = [f for f in report.findings if "gateway" in f.detail]
    assert report.ok and gateway[0].status == "pass", [
        f for f in report.findings if f.status == "fail"
    ]
    assert "delivered 100.0%" in gateway[0].detail
    assert os.path.getsize(store) > 0
