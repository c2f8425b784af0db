"""Images beside a trajectory store: each stored once, under its pixel hash.

A record names its images by hash (:mod:`agentenvs.envs.wire`); the pixels live in a
folder next to the store, ``<store>.images/<first two hex digits>/<sha256>.png``, so an
image shown in every turn of every episode of a group costs its bytes once, not once
per line. A file is written before the record that names it (to a temporary name,
``fsync``-ed, then renamed), so a store never names an image that is not on disk,
and an existing file is never written again. Readers get the bytes back with
:class:`ImageFiles`, which checks that they decode to the pixels their name says.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from agentenvs.envs.types import ImagePlacement, ImageRef, Trajectory, TrajectoryGroup
from agentenvs.envs.vision.images import ImageError, open_ref


def images_dir(store: str | Path) -> Path:
    store = Path(store)
    return store.with_name(store.name + ".images")


def trajectory_images(trajectory: Trajectory) -> Iterator[ImagePlacement]:
    for transition in trajectory.transitions:
        yield from transition.images


def group_images(group: TrajectoryGroup | None) -> dict[str, ImageRef]:
    """Every distinct image a group shows, by hash."""
    found: dict[str, ImageRef] = {}
    for trajectory in group.trajectories if group is not None else ():
        for placement in trajectory_images(trajectory):
            image = placement.image
            if image.data is not None or image.sha256 not in found:
                found[image.sha256] = image
    return found


class ImageFiles:
    """The image folder of one store."""

    def __init__(self, store: str | Path) -> None:
        self.root = images_dir(store)

    def path_of(self, sha256: str) -> Path:
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise ImageError(f"{sha256!r} is not an image hash")
        return self.root / sha256[:2] / f"{sha256}.png"

    def save(self, images: Iterable[ImageRef]) -> int:
        """Write the images not stored yet; how many were written. An image that carries
        no bytes must be on disk already (a group read back from this store)."""
        written = 0
        for image in images:
            path = self.path_of(image.sha256)
            if path.exists():
                continue
            if image.data is None:
                raise ImageError(
                    f"image {image.sha256[:12]} has no bytes and is not in {self.root}: "
                    "the record would name pixels nobody kept"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
            with open(tmp, "wb") as handle:
                handle.write(image.data)
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileNotFoundError):  # a concurrent writer won: same bytes
                os.replace(tmp, path)
            written += 1
        return written

    def read(self, sha256: str) -> bytes:
        path = self.path_of(sha256)
        try:
            return path.read_bytes()
        except OSError as err:
            raise ImageError(f"image {sha256[:12]} is not stored at {path}: {err}") from None

    def ref(self, image: ImageRef, *, verify: bool = True) -> ImageRef:
        """``image`` with its stored bytes; ``verify``: refused unless they decode to the
        pixels (and size) its name and record say."""
        data = self.read(image.sha256)
        loaded = ImageRef(image.sha256, image.width, image.height, data)
        if verify:
            decoded = open_ref(loaded)
            if (decoded.width, decoded.height) != (image.width, image.height):
                raise ImageError(
                    f"image {image.sha256[:12]} is {decoded.width}x{decoded.height}, "
                    f"recorded as {image.width}x{image.height}"
                )
        return loaded


def save_group_images(store: str | Path, group: TrajectoryGroup | None) -> int:
    """Store a group's images before its record is written (none for a text group)."""
    images = group_images(group)
    return ImageFiles(store).save(images.values()) if images else 0
