"""The default retriever: BM25 with the ``bm25s`` package, in process.

The index is a sparse matrix saved as ``.npy`` files and loaded memory-mapped, with
the passages kept in a JSONL file that is also read through ``mmap``; many env
processes on one machine share the pages. Text analysis (lower-case, words of two or
more characters, English stop words, Snowball stemming through PyStemmer when it is
installed) is recorded in the index folder, so queries are always analysed the way
the index was built. The default ``k1=0.9, b=0.4`` are Lucene's, which keeps rankings
close to pyserini's BM25.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentenvs.envs.search_r1.corpus import iter_corpus, resolve_corpus
from agentenvs.envs.search_r1.retrievers.base import Passage, Retriever, RetrieverError
from agentenvs.envs.search_r1.retrievers.batching import TopKBatcher
from agentenvs.envs.search_r1.retrievers.cache import build_atomically, index_dir_for
from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig

logger = logging.getLogger(__name__)

ANALYZER_FILE = "agentenvs_analyzer.json"
CORPUS_FILE = "corpus.jsonl"
ANALYZER_VERSION = 2  # 2: Porter stemming by default, to match Lucene
_WORD = re.compile(r"(?u)\b\w\w+\b")

Progress = Callable[[int], None]
"""Called with the number of passages just processed (for progress bars)."""


def _stemmer_for(language: str | None) -> Any | None:
    if not language:
        return None
    try:
        import Stemmer
    except ImportError:
        logger.warning("PyStemmer is not installed: bm25 runs without stemming")
        return None
    return Stemmer.Stemmer(language)


@dataclass
class Analyzer:
    """Text to index terms; its settings are saved next to the index."""

    stemmer: str | None = "porter"
    stopwords: str = "en"
    version: int = ANALYZER_VERSION
    _stem: Any = field(default=None, init=False, repr=False, compare=False)
    _stops: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)
    _cache: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from bm25s.tokenization import STOPWORDS_EN

        self._stem = _stemmer_for(self.stemmer)
        if self._stem is None:
            self.stemmer = None
        self._stops = frozenset(STOPWORDS_EN) if self.stopwords == "en" else frozenset()

    def terms(self, text: str) -> list[str]:
        words = [w for w in _WORD.findall(text.lower()) if w not in self._stops]
        if self._stem is None:
            return words
        cache = self._cache
        missing = [w for w in words if w not in cache]
        if missing:
            unique = list(dict.fromkeys(missing))
            for word, stem in zip(unique, self._stem.stemWords(unique), strict=True):
                cache[word] = stem
            if len(cache) > 2_000_000:  # a wiki-scale vocabulary: keep memory bounded
                cache.clear()
                return self._stem.stemWords(words)
        return [cache[w] for w in words]

    def settings(self) -> dict[str, Any]:
        return {"stemmer": self.stemmer, "stopwords": self.stopwords, "version": self.version}

    @classmethod
    def load(cls, index_dir: Path) -> Analyzer:
        path = index_dir / ANALYZER_FILE
        if not path.is_file():
            raise RetrieverError(
                f"{index_dir} is not a bm25 index made by agentenvs (no {ANALYZER_FILE}); "
                "build one with `agentenvs retriever index --backend bm25`"
            )
        data = json.loads(path.read_text())
        analyzer = cls(stemmer=data.get("stemmer"), stopwords=data.get("stopwords", "en"))
        if data.get("stemmer") and analyzer.stemmer is None:
            raise RetrieverError(
                f"the index in {index_dir} was built with {data['stemmer']!r} stemming; "
                "install PyStemmer (pip install PyStemmer) to search it"
            )
        return analyzer


def build_bm25_index(
    corpus: str | Path | None,
    out_dir: str | Path,
    *,
    k1: float = 0.9,
    b: float = 0.4,
    stemmer: str | None = "porter",
    progress: Progress | None = None,
) -> Path:
    """Index a corpus JSONL into ``out_dir`` (created; must not hold another index)."""
    import bm25s

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    analyzer = Analyzer(stemmer=stemmer)
    docs_path = out / CORPUS_FILE
    term_lists: list[list[str]] = []
    with docs_path.open("w", encoding="utf-8") as docs:
        for passage in iter_corpus(corpus):
            # The passage file is what search results are read from, by row number.
            docs.write(json.dumps({"id": passage.id, "contents": passage.contents}) + "\n")
            term_lists.append(analyzer.terms(passage.contents))
            if progress is not None and len(term_lists) % 1000 == 0:
                progress(1000)
    if progress is not None:
        progress(len(term_lists) % 1000)
    if not term_lists:
        raise RetrieverError(f"corpus {resolve_corpus(corpus)} has no passages")
    model = bm25s.BM25(k1=k1, b=b, method="lucene")
    model.index(term_lists, show_progress=False)
    del term_lists
    model.save(str(out), show_progress=False)
    (out / ANALYZER_FILE).write_text(json.dumps(analyzer.settings()))
    _open_passages(out)  # writes the line-offset index the mmap reader needs
    return out


def _open_passages(index_dir: Path) -> Any:
    from bm25s.utils.corpus import JsonlCorpus

    return JsonlCorpus(str(index_dir / CORPUS_FILE), show_progress=False, verbosity=0)


def default_bm25_index(config: RetrieverConfig) -> Path:
    """The cached index for ``config``'s corpus and settings, built on first use."""
    corpus = resolve_corpus(config.corpus)
    if not corpus.is_file():
        raise RetrieverError(f"corpus file not found: {corpus}")
    settings = {
        "k1": config.k1,
        "b": config.b,
        "stemmer": config.stemmer if _stemmer_for(config.stemmer) else None,
        "analyzer": ANALYZER_VERSION,
    }
    target = index_dir_for("bm25", corpus, settings)
    return build_atomically(
        target,
        lambda tmp: build_bm25_index(
            corpus, tmp, k1=config.k1, b=config.b, stemmer=settings["stemmer"]
        ),
    )


def top_k(scores: np.ndarray, k: int) -> list[int]:
    """Rows of the ``k`` best positive scores, best first (ties: lower row first)."""
    if k <= 16:  # a few arg-max passes beat a partition of the whole vector
        scores = scores.copy()
        rows = []
        for _ in range(min(k, len(scores))):
            row = int(scores.argmax())
            if scores[row] <= 0:
                break
            rows.append(row)
            scores[row] = -np.inf
        return rows
    positive = np.flatnonzero(scores > 0)  # ascending rows
    if len(positive) > k:
        values = scores[positive]
        kth = np.partition(values, len(values) - k)[len(values) - k]  # the k-th best score
        above, tied = positive[values > kth], positive[values == kth]
        positive = np.concatenate([above, tied[: k - len(above)]])
    order = np.lexsort((positive, -scores[positive]))
    return [int(r) for r in positive[order]]


class BM25Retriever(Retriever):
    """bm25s over a memory-mapped index; concurrent searches are batched."""

    def __init__(self, config: RetrieverConfig) -> None:
        import bm25s

        self.config = config
        index_dir = Path(config.index_dir) if config.index_dir else default_bm25_index(config)
        if not (index_dir / "params.index.json").is_file():
            raise RetrieverError(f"no bm25 index in {index_dir}")
        self.index_dir = index_dir
        self.analyzer = Analyzer.load(index_dir)
        self.model = bm25s.BM25.load(str(index_dir), mmap=True, load_corpus=False)
        self.passages = _open_passages(index_dir)
        self.num_docs = int(self.model.scores["num_docs"])
        self._batcher: TopKBatcher[Passage] = TopKBatcher(
            self._search_in_thread,
            max_batch=config.batch_size,
            max_wait_s=config.batch_wait_ms / 1000,
            max_concurrency=1,
        )

    def __len__(self) -> int:
        return self.num_docs

    def document_count(self) -> int:
        return self.num_docs

    def search_sync(self, queries: list[str], topk: int) -> list[list[Passage]]:
        """Blocking search (the server and benchmarks call this from worker threads).

        Scores come from bm25s; the top-k is picked here: bm25s's ``argpartition`` over
        a score vector that is mostly zeros (ties) was most of its search time. Ties go
        to the lower row, as in Lucene; passages with score 0 matched no term and are
        not returned.
        """
        results: list[list[Passage]] = []
        for query in queries:
            term_ids = self.model.get_tokens_ids(self.analyzer.terms(query))
            if not term_ids or topk <= 0:
                results.append([])
                continue
            scores = self.model.get_scores_from_ids(term_ids)  # read-only: thread-safe
            hits = []
            for row in top_k(scores, topk):
                entry = self.passages[row]
                hits.append(Passage(str(entry["id"]), entry["contents"], float(scores[row])))
            results.append(hits)
        return results

    async def _search_in_thread(self, queries: list[str], k: int) -> list[list[Passage]]:
        return await asyncio.to_thread(self.search_sync, queries, k)

    async def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        return await self._batcher.search(queries, topk)

    async def close(self) -> None:
        await self._batcher.close()
