"""Where indexes built on first use are kept, so each is built once per machine.

The root is ``$AGENTENVS_CACHE`` or ``~/.cache/agentenvs``. An index's folder name
hashes what it depends on (the corpus file's path, size and modification time, and
the backend's settings), so a changed corpus or setting gets a fresh index, and the
build is written to a temporary folder and renamed into place, so a killed build or
two processes building at once never leave a half-written index behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cache_root() -> Path:
    root = os.environ.get("AGENTENVS_CACHE") or Path.home() / ".cache" / "agentenvs"
    return Path(root)


def corpus_fingerprint(corpus: Path) -> dict[str, Any]:
    stat = corpus.stat()
    return {"path": str(corpus.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def index_dir_for(kind: str, corpus: Path, settings: dict[str, Any]) -> Path:
    payload = json.dumps({"corpus": corpus_fingerprint(corpus), **settings}, sort_keys=True)
    digest = hashlib.sha256(payload.encode()).hexdigest()[:16]
    return cache_root() / "search_r1" / kind / f"{corpus.stem}-{digest}"


def build_atomically(target: Path, build: Callable[[Path], None]) -> Path:
    """Run ``build(tmp_dir)`` and move the result to ``target`` unless it already exists."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        build(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first; its index is identical
            if not target.exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
