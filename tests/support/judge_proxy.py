"""A loopback HTTP proxy in front of a real server that counts requests and can fail.

For the judge tests: ``requests`` counts what reached the proxy (a cache hit makes
none), and ``fail_next = n`` answers the next ``n`` requests with 503 before passing
requests through again, as a server that is briefly overloaded does. Every other
request is forwarded to the real server unchanged and its answer sent back.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx


class JudgeProxy:
    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.requests = 0
        self.failed = 0
        self.fail_next = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with proxy._lock:
                    proxy.requests += 1
                    fail = proxy.fail_next > 0
                    if fail:
                        proxy.fail_next -= 1
                        proxy.failed += 1
                if fail:
                    self._reply(503, b'{"error": "overloaded (test proxy)"}')
                    return
                answer = httpx.post(
                    proxy.target + self.path,
                    content=body,
                    headers={"Content-Type": "application/json"},
                    timeout=120,
                )
                self._reply(answer.status_code, answer.content)

            def _reply(self, status: int, content: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def log_message(self, *args: object) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
