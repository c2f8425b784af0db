"""The ``/run_code`` request as the API edge accepts it: every field checked before any run.

Why here and not in the backend: a malformed value that reaches a worker costs a worker
(an ``OverflowError`` on an infinite timeout, an internal traceback on a lone surrogate)
and shows the client the supervisor's internals. Checked at the edge, the client gets a
422 naming the field, and no worker ever sees the request.

The caps below are fixed and documented (docs/sandbox_server.md) rather than per-server
options: they bound what one request can make the server buffer and write, whatever the
sandbox's own limits are. The sandbox's limits (time, memory, output) are the server's
configuration and are applied by :mod:`agentenvs.sandbox.server.limits`.
"""

from __future__ import annotations

import base64
import binascii
import math
import posixpath
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

KIB = 1024
MIB = 1024 * KIB

MAX_CODE_BYTES = 1 * MIB
"""Largest ``code`` (UTF-8). Model-written programs are kilobytes; 30 MB is an attack."""
MAX_STDIN_BYTES = 8 * MIB
MAX_FILES = 64
"""Most entries in ``files``, and separately in ``fetch_files``."""
MAX_FILES_BYTES = 16 * MIB
"""Most decoded bytes over all ``files`` (the work dir is a small tmpfs)."""
MAX_PATH_BYTES = 1024
"""Longest path (UTF-8 bytes), as the supervisor accepts (``supervisor/files.py``)."""
NAME_MAX_BYTES = 255
"""Longest name in a path (UTF-8 bytes): the kernel's NAME_MAX counts bytes, not characters
(255 CJK characters are 765 bytes)."""
MAX_BODY_BYTES = 40 * MIB
"""Largest request body: base64 ``files`` at their cap, plus ``code`` and ``stdin``."""
MAX_TIMEOUT_SECONDS = 1e9
"""Beyond this a timeout is not a number of seconds anyone means; below it, a value above
the server's timeout is clamped (and reported), not refused."""
MIN_MEMORY_MB = 32
"""Below this an interpreter cannot start; the same floor as ``SandboxConfig``."""
MAX_MEMORY_MB = 1024 * 1024
"""1 TiB: above this ``memory_limit_MB`` is refused as absurd rather than clamped."""

SANDBOXFUSION_LANGUAGES = frozenset(
    {
        "python", "python2", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp",
        "bash", "typescript", "sql", "rust", "cuda", "lua", "R", "perl", "D_ut", "ruby",
        "scala", "julia", "pytest", "junit", "kotlin_script", "jest", "verilog",
        "python_gpu", "lean", "swift", "racket", "gtest", "react",
    }
)  # fmt: skip
"""The ``language`` values SandboxFusion (and its PyPI client) know. An unknown one is a 422
there (a pydantic ``Literal``) and here; a known one this server does not run is a 422 too."""


def utf8_text(value: str) -> str:
    """Refuse lone surrogates (JSON ``"\\ud800"``): they cannot be written to a program."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"contains a character that is not valid UTF-8 (a lone surrogate at index {exc.start})"
        ) from None
    return value


def _max_bytes(limit: int) -> Callable[[str | None], str | None]:
    def check(value: str | None) -> str | None:
        # a str is at least one byte per character and at most four: most values are
        # decided without encoding a copy of them
        if value is None or len(value) <= limit // 4:
            return value
        if len(value) > limit or len(value.encode("utf-8")) > limit:
            raise ValueError(f"is larger than the server's cap of {limit} bytes (UTF-8)")
        return value

    return check


def work_dir_path(path: str) -> str:
    """A relative path that stays inside the work dir, normalised; else ``ValueError``.

    Security over parity: SandboxFusion joins the path to its temp dir as given, so an
    absolute path or ``../x`` would land outside it; here both are refused.
    """
    utf8_text(path)
    if not path or len(path.encode("utf-8")) > MAX_PATH_BYTES:
        raise ValueError(f"file paths must have 1 to {MAX_PATH_BYTES} bytes (UTF-8): {path!r:.80}")
    if any(len(name.encode("utf-8")) > NAME_MAX_BYTES for name in path.split("/")):
        raise ValueError(
            f"a name in a file path is longer than {NAME_MAX_BYTES} bytes (UTF-8): {path!r:.80}"
        )
    if "\x00" in path:
        raise ValueError(f"file paths cannot contain NUL: {path!r}")
    normal = posixpath.normpath(path)
    if posixpath.isabs(path) or normal in (".", "..") or normal.startswith("../"):
        raise ValueError(f"file paths must be relative and stay inside the work dir: {path!r}")
    return normal


def _finite_timeout(value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError("must be a finite number of seconds")
    return value


def _memory(value: int | None) -> int | None:
    if value is None or value in (-1, 0):
        return value
    if value < 0:
        raise ValueError("must be -1 or 0 (the server's limit) or a positive number of MB")
    if value < MIN_MEMORY_MB:
        raise ValueError(f"must be at least {MIN_MEMORY_MB} MB (an interpreter cannot start)")
    return value


Text = Annotated[str, AfterValidator(utf8_text)]
Timeout = Annotated[
    float | None,
    Field(default=None, ge=0, le=MAX_TIMEOUT_SECONDS),
    AfterValidator(_finite_timeout),
]


class RunCodeRequest(BaseModel):
    """SandboxFusion's request body, checked field by field.

    Unknown fields (``args``, which SandboxFusion passes to pytest only) are ignored, as
    there. A field left out (or ``null``) takes the server's value; ``memory_limit_MB``
    ``-1`` or ``0`` does too.
    """

    model_config = ConfigDict(extra="ignore")

    code: Annotated[Text, AfterValidator(_max_bytes(MAX_CODE_BYTES))]
    language: Text = "python"
    compile_timeout: Timeout = None
    run_timeout: Timeout = None
    memory_limit_MB: Annotated[
        int | None, Field(default=None, le=MAX_MEMORY_MB), AfterValidator(_memory)
    ] = None
    stdin: Annotated[Text | None, AfterValidator(_max_bytes(MAX_STDIN_BYTES))] = None
    files: Annotated[dict[str, str | None], Field(max_length=MAX_FILES)] = Field(
        default_factory=dict
    )
    fetch_files: Annotated[list[str], Field(max_length=MAX_FILES)] = Field(default_factory=list)
    max_output_bytes: Annotated[int | None, Field(default=None, ge=0)] = None
    """An agentenvs extension: lower the server's per-stream output cap for this run."""

    @field_validator("language")
    @classmethod
    def _known_language(cls, value: str) -> str:
        if value not in SANDBOXFUSION_LANGUAGES and value != "python3":
            raise ValueError(f"unknown language {value!r} (not one of SandboxFusion's)")
        return value

    @field_validator("files")
    @classmethod
    def _files(cls, files: dict[str, str | None]) -> dict[str, str | None]:
        checked: dict[str, str | None] = {}
        total = 0
        for path, content in files.items():
            normal = work_dir_path(path)
            if content is None:  # SandboxFusion skips these; so do we
                continue
            try:
                data = base64.b64decode(content, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ValueError(f"files[{path!r}] is not base64: {exc}") from None
            total += len(data)
            if total > MAX_FILES_BYTES:
                raise ValueError(f"the files add up to more than {MAX_FILES_BYTES} bytes")
            checked[normal] = content
        return checked

    @field_validator("fetch_files")
    @classmethod
    def _fetch_files(cls, paths: list[str]) -> list[str]:
        for path in paths:
            work_dir_path(path)
        return paths

    def decoded_files(self) -> dict[str, bytes]:
        """``files`` as bytes, keyed by the normalised path (validated already)."""
        return {
            path: base64.b64decode(content)
            for path, content in self.files.items()
            if content is not None
        }
