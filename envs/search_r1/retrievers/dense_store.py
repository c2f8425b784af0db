"""The passage store of a dense index: ids and contents, row i = faiss vector i.

``passages.jsonl`` holds one ``{"id", "contents"}`` line per passage (readable, and
itself a valid Search-R1 corpus); ``offsets.npy`` holds the n+1 byte offsets of those
lines. Reading memory-maps both, so opening a store for millions of passages costs
nothing up front and lookups touch only the lines they return.
"""

from __future__ import annotations

import json
import mmap
from pathlib import Path
from types import TracebackType

import numpy as np

from agentenvs.envs.search_r1.retrievers.base import RetrieverError

PASSAGES_FILE = "passages.jsonl"
OFFSETS_FILE = "offsets.npy"


class PassageStoreWriter:
    """Appends passages in order; :meth:`close` writes the offsets."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._file = (folder / PASSAGES_FILE).open("wb")
        self._offsets: list[int] = [0]

    def add(self, passage_id: str, contents: str) -> None:
        line = json.dumps({"id": passage_id, "contents": contents}, ensure_ascii=False)
        data = line.encode("utf-8") + b"\n"
        self._file.write(data)
        self._offsets.append(self._offsets[-1] + len(data))

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def close(self) -> None:
        if self._file.closed:
            return
        self._file.close()
        np.save(self.folder / OFFSETS_FILE, np.asarray(self._offsets, dtype=np.int64))

    def __enter__(self) -> PassageStoreWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class PassageStore:
    """Read-only, memory-mapped view of a store written by :class:`PassageStoreWriter`."""

    def __init__(self, folder: Path) -> None:
        passages, offsets = folder / PASSAGES_FILE, folder / OFFSETS_FILE
        if not passages.is_file() or not offsets.is_file():
            raise RetrieverError(f"{folder} has no passage store ({PASSAGES_FILE}, {OFFSETS_FILE})")
        self._offsets = np.load(offsets, mmap_mode="r")
        size = passages.stat().st_size
        if int(self._offsets[-1]) != size:
            raise RetrieverError(f"{passages} does not match {offsets} (truncated or rewritten?)")
        with passages.open("rb") as handle:
            self._data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else b""

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def get(self, row: int) -> tuple[str, str]:
        """(id, contents) of row ``row``."""
        start, end = int(self._offsets[row]), int(self._offsets[row + 1])
        record = json.loads(self._data[start:end])
        return str(record["id"]), str(record["contents"])
