"""Host side of the files API and of ``language``: what goes into a run request.

The path rules (relative, no ``.``/``..``, no symlink followed) are enforced where the
files are written and read, by the supervisor (``supervisor/files.py``); here only the
shape of the arguments is checked, so a malformed call is a clear ``sandbox_error``
result before any worker is involved.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence

LANGUAGES = ("python", "bash")
"""What the supervisor runs (``supervisor/usercode.py`` has the same list)."""


def request_problem(
    files: Mapping[str, bytes] | None, fetch_files: Sequence[str], language: str
) -> str:
    """Why these run arguments are refused ("" when they are fine)."""
    if language not in LANGUAGES:
        return f"unknown language {language!r} (supported: {', '.join(LANGUAGES)})"
    if files is not None:
        if not isinstance(files, Mapping):
            return "files: expected a mapping of relative path -> bytes"
        for path, content in files.items():
            if not isinstance(path, str):
                return f"files: path {path!r} is not a string"
            if not isinstance(content, bytes | bytearray | memoryview):
                return f"files: content of {path!r} is {type(content).__name__}, not bytes"
    if isinstance(fetch_files, str | bytes) or not all(isinstance(p, str) for p in fetch_files):
        return "fetch_files: expected a sequence of relative paths (strings)"
    return ""


def encode_files(files: Mapping[str, bytes] | None) -> dict[str, str]:
    return {path: base64.b64encode(bytes(data)).decode() for path, data in (files or {}).items()}


def decode_files(response: dict) -> dict[str, bytes]:
    """The answer's fetched files; anything malformed is left out rather than raised."""
    found = response.get("files")
    if not isinstance(found, dict):
        return {}
    decoded = {}
    for path, encoded in found.items():
        try:
            decoded[str(path)] = base64.b64decode(str(encoded), validate=True)
        except ValueError:
            continue
    return decoded
