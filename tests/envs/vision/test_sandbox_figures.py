"""A sandboxed program's saved figure comes back as a checked, bounded image."""

from __future__ import annotations

import asyncio

from support import machine_skips

from agentenvs.envs.vision.figures import run_for_figure
from agentenvs.sandbox import create

pytestmark = machine_skips.needs(*machine_skips.LOCAL_SANDBOX)

# A 40x30 PNG written with the standard library only (the sandbox's Python may lack Pillow).
PLOT = """
import struct, zlib
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
width, height = 40, 30
raw = b''.join(
    b'\\x00' + bytes(v for x in range(width) for v in (x * 6 % 256, y * 8 % 256, 128))
    for y in range(height)
)
header = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)
png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', header) + chunk(b'IDAT', zlib.compress(raw))
open('figure.png', 'wb').write(png + chunk(b'IEND', b''))
print('saved')
"""


def test_figures_come_back_bounded_and_named_by_their_pixels():
    async def main():
        async with create(backend="local", timeout=20, pool_size=1) as sandbox:
            saved = await run_for_figure(sandbox, PLOT)
            none = await run_for_figure(sandbox, "print('no plot')")
            big = await run_for_figure(sandbox, PLOT, max_bytes=64)
            junk = await run_for_figure(sandbox, "open('figure.png', 'w').write('not a png')")
            escape = await run_for_figure(sandbox, "print(1)", name="../../etc/passwd")
            return saved, none, big, junk, escape

    saved, none, big, junk, escape = asyncio.run(main())
    assert saved.result.stdout.strip() == "saved", saved.result
    assert saved.image is not None and (saved.image.width, saved.image.height) == (40, 30)
    assert len(saved.image.sha256) == 64 and saved.image.data.startswith(b"\x89PNG")
    assert none.image is None and "saved no figure.png" in none.problem
    assert big.image is None and "over the 64-byte bound" in big.problem
    assert junk.image is None and "not a usable image" in junk.problem
    assert escape.image is None and escape.problem


def test_an_image_part_accepts_the_figure():
    from agentenvs.envs.vision.parts import tool_message

    async def main():
        async with create(backend="local", timeout=20, pool_size=1) as sandbox:
            return await run_for_figure(sandbox, PLOT)

    figure = asyncio.run(main())
    message = tool_message("Your plot:", [figure.image])
    assert message["content"][1]["image"] == figure.image
