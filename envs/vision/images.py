"""Images by content: decoded to RGB, named by a hash of their pixels, kept as PNG bytes.

Every image that enters an observation passes through :func:`image_ref` once: it is
decoded (PNG, JPEG, a PIL image, a file), converted to RGB, bounded in size, encoded
as PNG without metadata and named by :func:`pixel_hash`. The hash is of the pixels,
not of a file, so a trainer that holds the same picture in another container (a PIL
image in a TRL dataset, JPEG bytes) can be checked against the engine's copy by
decoding and hashing; the PNG bytes are what the store keeps and what the engine is
sent, so nothing is lost between the two.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.types import ImageRef

MAX_IMAGE_PIXELS = 4096 * 4096
"""The largest image an observation may show; a larger one is refused with a clear
error (the processor would shrink it anyway, and the store would keep every byte)."""
MAX_IMAGE_BYTES = 32 * 1024 * 1024
"""The largest encoded image accepted, before decoding (a decompression bomb is
refused by its size, never decoded)."""


class ImageError(AgentEnvsError, ValueError):
    """An image that cannot be used: unreadable, too large, or not an image at all."""


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError as err:  # pillow comes with transformers' image extras
        raise ImageError("images need Pillow: pip install pillow") from err
    return Image


def pixel_hash(image: Any) -> str:
    """The sha256 of an image's RGB pixels and size: the name of its content."""
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    digest = hashlib.sha256(f"rgb:{rgb.width}x{rgb.height}:".encode())
    digest.update(rgb.tobytes())
    return digest.hexdigest()


def decode(data: bytes) -> Any:
    """Encoded image bytes as an RGB PIL image, with the size bounds enforced."""
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageError(f"image of {len(data)} bytes is over the {MAX_IMAGE_BYTES}-byte bound")
    Image = _pil()
    try:
        with Image.open(io.BytesIO(data)) as opened:
            _check_size(opened.width, opened.height)
            return opened.convert("RGB")
    except ImageError:
        raise
    except Exception as err:  # PIL raises many kinds for bad data
        raise ImageError(f"not a readable image ({type(err).__name__}: {err})") from None


def _check_size(width: int, height: int) -> None:
    if width < 1 or height < 1 or width * height > MAX_IMAGE_PIXELS:
        raise ImageError(
            f"image of {width}x{height} pixels is outside the bounds "
            f"(1 to {MAX_IMAGE_PIXELS} pixels)"
        )


def png_bytes(image: Any) -> bytes:
    """RGB PNG bytes without metadata (the same pixels always encode the same way here)."""
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=False)
    return out.getvalue()


def image_ref(source: Any) -> ImageRef:
    """An :class:`ImageRef` with its PNG bytes, from a PIL image, encoded bytes, a file
    path or an :class:`ImageRef` that carries bytes (returned as it is)."""
    if isinstance(source, ImageRef):
        if source.data is None:
            raise ImageError(f"image {source.sha256[:12]} carries no bytes to render")
        return source
    Image = _pil()
    if isinstance(source, str | Path):
        try:
            source = Path(source).read_bytes()
        except OSError as err:
            raise ImageError(f"cannot read image file {source}: {err}") from None
    if isinstance(source, bytes | bytearray):
        image = decode(bytes(source))
    elif isinstance(source, Image.Image):
        _check_size(source.width, source.height)
        image = source.convert("RGB")
    else:
        raise ImageError(
            f"an image part holds {type(source).__name__}; give a PIL image, PNG/JPEG bytes, "
            "a file path or an ImageRef"
        )
    return ImageRef(pixel_hash(image), image.width, image.height, png_bytes(image))


def open_ref(ref: ImageRef) -> Any:
    """The RGB PIL image of an :class:`ImageRef` that carries its bytes, checked
    against its name: pixels that do not hash to ``ref.sha256`` are refused."""
    if ref.data is None:
        raise ImageError(f"image {ref.sha256[:12]} carries no bytes")
    image = decode(ref.data)
    found = pixel_hash(image)
    if found != ref.sha256:
        raise ImageError(f"image bytes hash to {found[:12]}, not to their name {ref.sha256[:12]}")
    return image
