"""An ASGI app under uvicorn in a background thread, for tests and one-process setups.

It binds its socket before the thread starts, so ``port=0`` yields a free port that is
already listening when the block begins; leaving the block stops the server.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class RunningServer:
    """A server started by :func:`serve_openenv`: its base URL and its app."""

    url: str
    app: Any
    port: int


@contextmanager
def serve_app(app: Any, host: str = "127.0.0.1", port: int = 0) -> Iterator[RunningServer]:
    """Run ``app`` under uvicorn in a background thread until the block ends.

    ``port=0`` takes a free port; the URL says which. For tests and one-process setups;
    a deployment runs ``agentenvs serve`` instead.
    """
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    # asyncio's own loop: a ReTool task starts sandbox workers as another user (uvloop cannot)
    config = uvicorn.Config(app, log_level="warning", ws="auto", lifespan="on", loop="asyncio")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(2000):
            if server.started or not thread.is_alive():
                break
            threading.Event().wait(0.01)
        if not server.started:
            raise RuntimeError(f"the server on {host}:{bound} did not start")
        yield RunningServer(f"http://{host}:{bound}", app, bound)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
