"""Which Ray a run uses: a bad ``--ray-address`` fails in seconds with one error line, a
loopback cluster is joined with no environment switch, and a run without an address
starts its own Ray even when ``RAY_ADDRESS`` names another. Each run says which Ray it
used, in one stderr line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import pytest
from support.ray_cluster import loopback_cluster

from agentenvs.rollout.collect.executors.ray_address import RayAddressError, parse, resolve
from agentenvs.rollout.collect.executors.ray_executor import RayExecutor


def rollout(out, *extra: str, env: dict[str, str] | None = None, timeout: float = 300):
    command = [sys.executable, "-m", "agentenvs.rollout.cli", "rollout", "guess_number",
               "--groups", "2", "--group-size", "1", "--out", str(out),
               "--executor", "ray", "--json-summary", *extra]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    return done, time.monotonic() - started


def without_switch(**changes: str) -> dict[str, str]:
    """This environment minus Ray's loopback switch (tests/conftest.py sets it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
                                                            "RAY_ADDRESS")}  # fmt: skip
    return {**env, **changes}


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("notanaddress", "is not a Ray address"),
        ("10.0.0.5", "is not a Ray address"),
        ("host:port", "the port must be a number"),
        ("host:0", "the port must be a number"),
        (":6379", "is not a Ray address"),
        ("http://host:6379", "is not a Ray address"),
    ],
)
def test_malformed_addresses_are_refused_by_form(address, words):
    with pytest.raises(RayAddressError, match=words):
        parse(address)


def test_addresses_keep_their_form():
    assert parse("10.0.0.5:6379").address == "10.0.0.5:6379"
    assert parse("ray://head:10001").address == "ray://head:10001"
    assert parse("[::1]:6379").loopback and parse("localhost:1").loopback
    assert not parse("10.0.0.5:6379").loopback


def test_an_address_nothing_listens_on_fails_within_seconds():
    started = time.monotonic()
    with pytest.raises(RayAddressError, match=r"cannot reach a Ray cluster at 127\.0\.0\.1:1"):
        resolve("127.0.0.1:1")
    assert time.monotonic() - started < 5


async def test_the_executor_refuses_an_unreachable_address_before_ray_init():
    import ray

    executor = RayExecutor(address="127.0.0.1:1")
    with pytest.raises(RayAddressError):
        executor.connect()
    assert not ray.is_initialized()


@pytest.mark.parametrize("address", ["127.0.0.1:1", "notanaddress"])
def test_cli_bad_address_is_one_error_line_and_exit_2_within_10s(address, tmp_path):
    done, elapsed = rollout(tmp_path / "g.jsonl", "--ray-address", address, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines[:5]
    assert address in lines[0]
    assert elapsed < 10, f"took {elapsed:.1f}s"


@pytest.fixture(scope="module")
def cluster():
    with loopback_cluster(worker={"num_cpus": 1}) as handle:
        yield handle


@pytest.mark.services
def test_cli_joins_a_loopback_cluster_with_no_environment_switch(cluster, tmp_path):
    out = tmp_path / "g.jsonl"
    done, _ = rollout(out, "--ray-address", cluster.address, env=without_switch(), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["ok"] == 2
    said = [line for line in done.stderr.splitlines() if line.startswith("ray: ")]
    assert said == [f"ray: joined the Ray cluster at {cluster.address} (2 node(s), 2 CPUs)"]


@pytest.mark.services
def test_cli_without_an_address_starts_its_own_ray_despite_ray_address(cluster, tmp_path):
    import ray

    jobs_before = len(ray._private.state.jobs())
    env = without_switch(RAY_ADDRESS=cluster.address,
                         RAY_TMPDIR=tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # fmt: skip
    done, _ = rollout(tmp_path / "g.jsonl", env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("ray: ")]
    assert len(said) == 1 and said[0].startswith("ray: started a local Ray for this run at ")
    assert cluster.address not in said[0]
    assert len(ray._private.state.jobs()) == jobs_before  # no driver joined the cluster


def test_a_port_that_is_not_a_ray_gcs_is_named_as_such():
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer_like_a_web_server() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(64)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    threading.Thread(target=answer_like_a_web_server, daemon=True).start()
    try:
        with pytest.raises(RayAddressError, match="does not answer as a Ray GCS"):
            resolve(f"127.0.0.1:{port}", timeout=2)
    finally:
        server.close()
