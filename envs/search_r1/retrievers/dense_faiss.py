"""faiss index construction and loading for the dense retriever.

Indexes are described by faiss factory strings with inner-product metric: ``"Flat"``
(exact, the default, what Search-R1's e5 index is), ``"HNSW32"`` (graph, no training),
or ``"IVF4096,PQ64"``-style compressed indexes for corpora too big to hold as float32
(wiki-18: 21M x 768 floats is 64 GB). Vectors arrive in chunks; an index that needs
training buffers the first ``train_size`` vectors, trains on them, then streams.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np

from agentenvs.envs.search_r1.retrievers.base import RetrieverError

INDEX_FILE = "index.faiss"


class FaissBuilder:
    """Adds vector chunks to a new index, training it first when the type needs it."""

    def __init__(self, dim: int, factory: str = "Flat", *, train_size: int = 65_536) -> None:
        import faiss

        try:
            self.index: Any = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as err:
            raise RetrieverError(f"bad faiss index spec {factory!r}: {err}") from err
        self.train_size = train_size
        self._buffer: list[np.ndarray] = []
        self._buffered = 0

    def add(self, vectors: np.ndarray) -> None:
        if self.index.is_trained:
            self.index.add(vectors)
            return
        self._buffer.append(vectors)
        self._buffered += len(vectors)
        if self._buffered >= self.train_size:
            self._train_and_flush()

    def _train_and_flush(self) -> None:
        sample = np.concatenate(self._buffer)
        self._buffer, self._buffered = [], 0
        try:
            self.index.train(sample)
        except RuntimeError as err:
            raise RetrieverError(f"faiss training on {len(sample)} vectors failed: {err}") from err
        self.index.add(sample)

    def finish(self) -> Any:
        if self._buffer:
            self._train_and_flush()
        return self.index

    def save(self, folder: Path) -> None:
        import faiss

        faiss.write_index(self.finish(), str(folder / INDEX_FILE))


def load_faiss_index(folder: Path) -> Any:
    """Read ``index.faiss``; flat codes are memory-mapped rather than copied into RAM."""
    import faiss

    path = folder / INDEX_FILE
    if not path.is_file():
        raise RetrieverError(f"{folder} has no {INDEX_FILE}")
    mmap_flags = faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY
    try:
        return faiss.read_index(str(path), mmap_flags)
    except RuntimeError:  # index types without mmap support load into memory
        return faiss.read_index(str(path))


def tune_search(index: Any, *, ef_search: int | None = None, nprobe: int | None = None) -> None:
    """Recall/speed knobs of approximate indexes (ignored by index types without them)."""
    import faiss

    real = faiss.downcast_index(index)
    if ef_search is not None and isinstance(real, faiss.IndexHNSW):
        real.hnsw.efSearch = int(ef_search)
    if nprobe is not None:
        with contextlib.suppress(RuntimeError):  # not an IVF index
            faiss.extract_index_ivf(index).nprobe = int(nprobe)
