"""Retriever backends behind one interface, chosen by :class:`RetrieverConfig.kind`.

* ``bm25`` (default): bm25s in process, memory-mapped index (:mod:`.bm25`).
* ``lucene``: pyserini's Lucene BM25 (:mod:`.lucene`).
* ``dense``: faiss inner product over sentence embeddings (:mod:`.dense`).
* ``http``: any Search-R1-compatible ``/retrieve`` server (:mod:`.http`).

:func:`make_retriever` keeps one retriever per process per config: indexes are
opened (or built) once and shared by every env, and concurrent searches from those
envs are batched together. Backends import their heavy dependencies only here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from agentenvs.envs.search_r1.retrievers.base import Passage, Retriever, RetrieverError
from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig, RetrieverKind

__all__ = [
    "Passage",
    "Retriever",
    "RetrieverConfig",
    "RetrieverError",
    "RetrieverKind",
    "build_index",
    "clear_retriever_cache",
    "make_retriever",
]

_CACHE: dict[str, Retriever] = {}
_LOCK = threading.Lock()


def _construct(config: RetrieverConfig) -> Retriever:
    kind = config.kind
    try:
        if kind == "bm25":
            from agentenvs.envs.search_r1.retrievers.bm25 import BM25Retriever

            return BM25Retriever(config)
        if kind == "http":
            from agentenvs.envs.search_r1.retrievers.http import HttpRetriever

            return HttpRetriever(config)
        if kind == "lucene":
            from agentenvs.envs.search_r1.retrievers.lucene import LuceneRetriever

            return LuceneRetriever(config)
        if kind == "dense":
            from agentenvs.envs.search_r1.retrievers.dense import DenseRetriever

            return DenseRetriever(config)
    except ImportError as err:
        raise RetrieverError(
            f"the {kind!r} retriever needs packages that are not installed ({err}); "
            "install them with: pip install 'agentenvs[search]'"
        ) from err
    raise RetrieverError(f"unknown retriever kind {kind!r}; choose bm25, lucene, dense or http")


def make_retriever(config: RetrieverConfig | None = None, *, cached: bool = True) -> Retriever:
    """The retriever for ``config``; with ``cached`` the same object for equal configs."""
    config = config or RetrieverConfig()
    if not cached:
        return _construct(config)
    key = config.cache_key()
    with _LOCK:  # building an index must happen once even with threads racing
        retriever = _CACHE.get(key)
        if retriever is None:
            retriever = _construct(config)
            _CACHE[key] = retriever
        return retriever


def clear_retriever_cache() -> None:
    """Forget cached retrievers (tests; a process that switches corpora)."""
    with _LOCK:
        _CACHE.clear()


def build_index(
    config: RetrieverConfig, out_dir: str | Path, progress: Callable[[int], None] | None = None
) -> Path:
    """Build ``config.kind``'s index of ``config.corpus`` into ``out_dir``.

    Each local backend module provides ``build_<kind>_index(config, out_dir, progress)``
    returning the index folder; ``progress`` is called with the number of passages just
    processed. The folder can then be passed as ``index_dir``.
    """
    out = Path(out_dir)
    kind = config.kind
    try:
        if kind == "bm25":
            from agentenvs.envs.search_r1.retrievers.bm25 import build_bm25_index

            return build_bm25_index(
                config.corpus, out, k1=config.k1, b=config.b, stemmer=config.stemmer,
                progress=progress,
            )  # fmt: skip
        if kind == "lucene":
            from agentenvs.envs.search_r1.retrievers.lucene import build_lucene_index

            return build_lucene_index(config, out, progress)
        if kind == "dense":
            from agentenvs.envs.search_r1.retrievers.dense import build_dense_index

            return build_dense_index(config, out, progress)
    except ImportError as err:
        raise RetrieverError(
            f"building a {kind!r} index needs packages that are not installed ({err}); "
            "install them with: pip install 'agentenvs[search]'"
        ) from err
    raise RetrieverError(f"there is no local index for retriever kind {kind!r}")
