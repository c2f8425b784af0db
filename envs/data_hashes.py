"""Content hashes of the data an environment reads (questions, corpora, problems, games).

A run is only reproducible on the same data, and a path says nothing about what the
file held when the run read it: a corpus can be edited in place or copied with every
passage changed. So each data source an environment declares
(:meth:`~agentenvs.envs.config.EnvConfig.data_sources`) is recorded by the hash of its
content, never by its path: the same bytes anywhere give the same hash, and one changed
byte gives another.

A file is read once per process: its hash is kept under its identity on disk (device,
inode, size, modification time), so a store's provenance, a card and a test may ask as
often as they like and only a file that changed is read again. A folder (an index, a
tree of game files) hashes as the sorted list of its files' relative paths and hashes.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping
from pathlib import Path

DIGEST_CHARS = 16
"""Hex characters kept of each SHA-256 (the length every other hash here uses)."""
MISSING = "missing"
"""What a declared source that does not exist hashes to (the config fails elsewhere)."""

_BLOCK = 1 << 20
_cache: dict[tuple[int, int, int, int], str] = {}
_lock = threading.Lock()


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (first :data:`DIGEST_CHARS` hex characters)."""
    stat = path.stat()
    identity = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    with _lock:
        known = _cache.get(identity)
    if known is not None:
        return known
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
    value = digest.hexdigest()[:DIGEST_CHARS]
    with _lock:
        _cache[identity] = value
    return value


def tree_digest(folder: Path) -> str:
    """One hash of every file under ``folder`` (names relative to it, in sorted order);
    hidden files and ``__pycache__`` folders are not data and are left out."""
    lines = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = Path(root) / name
            lines.append(f"{path.relative_to(folder).as_posix()}\0{file_digest(path)}\n")
    lines.sort()
    return hashlib.sha256("".join(lines).encode()).hexdigest()[:DIGEST_CHARS]


def source_digest(path: str | os.PathLike[str]) -> str:
    """The content hash of a file or a folder; :data:`MISSING` when neither exists."""
    resolved = Path(path).expanduser()
    if resolved.is_file():
        return file_digest(resolved)
    if resolved.is_dir():
        return tree_digest(resolved)
    return MISSING


def data_digests(sources: Mapping[str, str | os.PathLike[str]]) -> dict[str, str]:
    """``{name: content hash}`` of the sources a config declares, names sorted."""
    return {name: source_digest(sources[name]) for name in sorted(sources)}
