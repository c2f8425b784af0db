"""The judge's cache: one verdict text per (judge model, weights, prompt hash, input).

In memory by default. A GRPO group often holds the same short answer several times,
and a retried group re-runs episodes the judge already scored; a process-wide map
catches both and cannot go stale across runs, since it dies with the process.
``cache="disk"`` keeps verdicts in a directory (one small JSON file per key, written
atomically, so parallel workers can share it) for re-judging a store or resuming a
run; the key holds everything that decides the text (model, weights hash when known,
prompt hash, sampling settings, the rendered input), so a changed prompt or judge
never reads another one's verdicts. Only answers the server gave are cached; an HTTP
failure is tried again next time.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

MEMORY_ENTRIES = 50_000
"""Oldest entries go first past this (a verdict is a few hundred bytes)."""

_memory: OrderedDict[str, str] = OrderedDict()


def cache_key(parts: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of everything that decides a verdict."""
    payload = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


class VerdictCache:
    """Get and put verdict texts in memory, on disk, or nowhere (``off``)."""

    def __init__(self, kind: str, directory: str | Path | None = None) -> None:
        self.kind = kind
        self.directory = Path(directory) if directory is not None else None
        if kind == "disk":
            if self.directory is None:
                raise ValueError("a disk cache needs a directory")
            self.directory.mkdir(parents=True, exist_ok=True)

    def get(self, key: str) -> str | None:
        if self.kind == "memory":
            text = _memory.get(key)
            if text is not None:
                _memory.move_to_end(key)
            return text
        if self.kind == "disk":
            try:
                data = json.loads(self._path(key).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            text = data.get("text") if isinstance(data, dict) else None
            return text if isinstance(text, str) else None
        return None

    def put(self, key: str, text: str) -> None:
        if self.kind == "memory":
            _memory[key] = text
            _memory.move_to_end(key)
            while len(_memory) > MEMORY_ENTRIES:
                _memory.popitem(last=False)
        elif self.kind == "disk":
            path = self._path(key)
            handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                json.dump({"text": text}, file)
            os.replace(temporary, path)

    def _path(self, key: str) -> Path:
        assert self.directory is not None
        return self.directory / f"{key}.json"


def clear_memory_cache() -> None:
    """Forget every in-memory verdict (tests, or a judge whose server changed weights
    under the same name and without a ``weights_dir`` to tell)."""
    _memory.clear()
