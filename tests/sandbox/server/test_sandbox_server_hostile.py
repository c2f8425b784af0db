"""Issue #40 through ``agentenvs sandbox serve``: hostile programs and hostile clients.

The real command on the local and the docker backend, with ``--client-timeout 1`` (a
request head within 1 s, a body within 3 s): a program that touches every device node
changes none (class 1); a file name of 255 characters but 765 bytes is a 422, not a
sandbox error; a connection that never completes its request head is closed, a body that
does not arrive is a 408, and a large body that finds the server's body budget taken is
a 503 while a small request is still served (class 6).
"""

from __future__ import annotations

import base64
import socket
import threading
import time

import httpx
import pytest
from support.sandbox_escape.fail_closed import TOUCH_EVERY_DEVICE_NODE
from support.sandbox_server_helpers import module_server, post_run_code, run_python

from agentenvs.sandbox.server.request import MAX_BODY_BYTES

server = module_server("--client-timeout", "1", "--timeout", "5", backends=("local", "docker"))


def test_a_program_changes_no_device_node(server) -> None:
    answer = run_python(server, TOUCH_EVERY_DEVICE_NODE)
    assert answer["run_result"]["stdout"] == "tried True changed []\n", answer


def test_names_are_measured_in_bytes(server) -> None:
    name = "名" * 255  # 255 characters, 765 bytes: over NAME_MAX
    body = {"code": "print(1)", "files": {name: base64.b64encode(b"x").decode()}}
    answer = post_run_code(server.url, body, expect=422)
    assert "255 bytes" in answer["message"], answer
    answer = post_run_code(server.url, {"code": "print(1)", "fetch_files": [name]}, expect=422)
    assert "255 bytes" in answer["message"], answer
    fits = {"code": "print(open('名名.txt').read())", "files": {"名名.txt": "eA=="}}
    assert run_python(server, **fits)["run_result"]["stdout"] == "x\n"


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Did the server close this connection (end of stream or a reset) in time?"""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _port(server) -> int:
    return int(server.url.rsplit(":", 1)[1])


def test_connections_without_a_request_head_are_closed(server) -> None:
    silent = socket.create_connection(("127.0.0.1", _port(server)))
    partial = socket.create_connection(("127.0.0.1", _port(server)))
    partial.sendall(b"POST /run_code HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
    try:
        assert _closed_within(silent, 5.0), "a connection that sent nothing stayed open"
        assert _closed_within(partial, 5.0), "a connection with half a head stayed open"
    finally:
        silent.close()
        partial.close()


def test_a_body_that_does_not_arrive_is_refused(server) -> None:
    sock = socket.create_connection(("127.0.0.1", _port(server)))
    head = b"POST /run_code HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n"
    sock.sendall(head + b'{"code": "')
    sock.settimeout(10.0)
    try:
        answer = sock.recv(4096)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]


def _stalled_upload(port: int, size: int, opened: threading.Event, stop: threading.Event) -> None:
    """A large body, announced and begun, then held back (its budget share held)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        head = f"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n"
        sock.sendall(head.encode() + b'{"code": "')
        opened.set()
        stop.wait(10)


def test_large_bodies_wait_for_the_budget_small_ones_pass(server) -> None:
    """The server holds at most one body at the cap at once: a stalled upload near the
    cap takes the budget; a second large one is turned away (503) instead of buffered,
    while a small request is served meanwhile."""
    size = MAX_BODY_BYTES - 4096
    stop, opened = threading.Event(), threading.Event()
    staller = threading.Thread(target=_stalled_upload, args=(_port(server), size, opened, stop))
    staller.start()
    try:
        assert opened.wait(5)
        time.sleep(0.3)  # admitted
        second = httpx.post(
            f"{server.url}/run_code",
            content=b'{"code": "print(1)", "stdin": "' + b"x" * (size - 100) + b'"}',
            headers={"content-type": "application/json"},
            timeout=30,
        )
        assert second.status_code == 503, (second.status_code, second.text[:300])
        small = run_python(server, "print(2)")
        assert small["run_result"]["stdout"] == "2\n", small
    finally:
        stop.set()
        staller.join()


@pytest.fixture(autouse=True)
def _server_still_answers(server):
    yield
    assert httpx.get(f"{server.url}/v1/ping", timeout=5).status_code == 200
