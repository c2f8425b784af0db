"""A loopback TCP proxy the tests can cut: a network failure between a client and a
real server, without touching the server.

``cut()`` closes every connection through it and stops listening (new connections
are refused); ``restore()`` listens again on the same port. It runs its own event
loop in a thread, so a test's loop and a synchronous test can both use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.connections = 0
        self.restore()

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def restore(self) -> None:
        async def listen() -> None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

        self._run(listen())

    def cut(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()
                self._server = None
            for writer in list(self._writers):
                with contextlib.suppress(Exception):
                    writer.transport.abort()  # a reset, as a dead peer gives
            self._writers.clear()

        self._run(close())

    def close(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}
