"""Figures a sandboxed program saved, fetched back as images (a plot tool's answer).

A program the model wrote (matplotlib's ``savefig``, Pillow, or raw PNG bytes) saves
its figure to a file in its work dir; the sandbox's supervisor reads it back after the
program ended (``fetch_files``: outside the program, only a regular file inside the
work dir, at most ``max_file_bytes``). Here the figure is bounded again (bytes, then
pixels, by :func:`~agentenvs.envs.vision.images.image_ref`), decoded and named by its
pixels, so what reaches the context is a checked image or a sentence saying why there
is none: the program's output is hostile input like any other, and a bad figure is the
model's mistake to read about, never an exception out of the environment.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentenvs.envs.types import ImageRef
from agentenvs.envs.vision.images import ImageError, image_ref
from agentenvs.sandbox.base import ExecResult, Sandbox

FIGURE_FILE = "figure.png"
MAX_FIGURE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class Figure:
    """What a run left: the figure, or why there is none (the run's own result beside it)."""

    result: ExecResult
    image: ImageRef | None
    problem: str = ""


async def run_for_figure(
    sandbox: Sandbox,
    code: str,
    *,
    name: str = FIGURE_FILE,
    max_bytes: int = MAX_FIGURE_BYTES,
    timeout: float | None = None,
) -> Figure:
    """Run ``code`` and fetch the figure it saved as ``name`` (relative to its work dir)."""
    result = await sandbox.run(code, timeout=timeout, fetch_files=[name])
    data = result.files.get(name)
    if data is None:
        return Figure(result, None, f"the program saved no {name}")
    if len(data) > max_bytes:
        return Figure(result, None, f"{name} is {len(data)} bytes, over the {max_bytes}-byte bound")
    try:
        return Figure(result, image_ref(data))
    except ImageError as err:
        return Figure(result, None, f"{name} is not a usable image: {err}")
