"""Host side of the warm-worker wire protocol (the ``supervisor`` package is the other side).

Frames are a 4-byte big-endian length followed by UTF-8 JSON. The sandboxed interpreter
is started with ``-c BOOTSTRAP``: the bootstrap reads one raw frame (the supervisor's
bundled source) from stdin and executes it, so the supervisor needs no file inside the sandbox
and no read permission on the host's package directory. Other backends (Docker) can
reuse the same bootstrap and frames.
"""

from __future__ import annotations

import asyncio
import json
import struct

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.sandbox.supervisor.bundle import bundle_source

MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""A response larger than this means the supervisor is broken (outputs are capped far below)."""

BOOTSTRAP = (
    "import os\n"
    "def _r(n):\n"
    "    b = b''\n"
    "    while len(b) < n:\n"
    "        c = os.read(0, n - len(b))\n"
    "        if not c:\n"
    "            raise SystemExit(3)\n"
    "        b += c\n"
    "    return b\n"
    "exec(compile(_r(int.from_bytes(_r(4), 'big')), 'agentenvs-supervisor', 'exec'),"
    " {'__name__': 'agentenvs_supervisor'})\n"
)


class ProtocolError(AgentEnvsError, RuntimeError):
    """The supervisor sent something that is not a valid frame."""


def supervisor_source() -> bytes:
    """The supervisor package as the single frame the bootstrap executes."""
    return bundle_source()


def encode_frame(payload: dict | bytes) -> bytes:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return struct.pack(">I", len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> dict:
    """Read one frame; raises ``asyncio.IncompleteReadError`` on EOF."""
    (size,) = struct.unpack(">I", await reader.readexactly(4))
    if size > MAX_RESPONSE_BYTES:
        raise ProtocolError(f"frame of {size} bytes exceeds {MAX_RESPONSE_BYTES}")
    try:
        message = json.loads(await reader.readexactly(size))
    except ValueError as exc:
        raise ProtocolError(f"invalid JSON frame: {exc}") from exc
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a JSON object")
    return message
