"""The supervisor's end of the wire protocol: length-prefixed JSON frames on raw fds.

Frames are a 4-byte big-endian length, then UTF-8 JSON (the host side is
``agentenvs.sandbox.pool.protocol``). Raw descriptors rather than file objects, because
the same functions serve the host protocol, a prepared child's private request pipe and
nothing else: no buffering that a fork could duplicate.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct

MAX_FRAME = 256 * 1024 * 1024


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        try:
            chunk = os.read(fd, min(n, 1 << 20))
        except InterruptedError:
            continue
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> dict | None:
    head = _read_exact(fd, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    if size > MAX_FRAME:
        return None
    body = _read_exact(fd, size)
    return None if body is None else json.loads(body)


def write_frame(fd: int, obj: dict) -> None:
    body = json.dumps(obj).encode()
    data = memoryview(struct.pack(">I", len(body)) + body)
    while data:
        try:
            written = os.write(fd, data)
        except InterruptedError:
            continue
        data = data[written:]


def dup_high(fd: int) -> int:
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)
