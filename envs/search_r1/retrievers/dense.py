"""``dense``: faiss inner-product search over sentence embeddings.

An index folder holds ``index.faiss`` (unit vectors, inner product = cosine),
``passages.jsonl`` + ``offsets.npy`` (the passage store, row i = vector i) and
``dense_index.json`` (model, prefixes, sizes). Both big files are memory-mapped on load.

Prefixes follow e5's convention when wanted (``query: `` / ``passage: ``): the passage
prefix is baked into the vectors at build time, and the query prefix recorded then is
used at search time unless the caller passes another. Blank queries return no passages
(every vector is *somebody's* nearest neighbour, so a blank query would otherwise
"find" arbitrary text).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from agentenvs.envs.search_r1.retrievers.base import Passage, Retriever, RetrieverError
from agentenvs.envs.search_r1.retrievers.batching import BlockingSearch
from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig
from agentenvs.envs.search_r1.retrievers.dense_encoder import Encoder, SentenceEncoder, model_label
from agentenvs.envs.search_r1.retrievers.dense_faiss import (
    FaissBuilder,
    load_faiss_index,
    tune_search,
)
from agentenvs.envs.search_r1.retrievers.dense_store import PassageStore, PassageStoreWriter
from agentenvs.envs.search_r1.retrievers.indexing import (
    BuildProgress,
    ProgressCallback,
    count_lines,
    iter_passages,
)

log = logging.getLogger(__name__)

META_FILE = "dense_index.json"
FORMAT_VERSION = 1


@dataclass
class DenseIndexInfo:
    """``dense_index.json``: everything needed to search the index consistently."""

    kind: str
    format: int
    model: str
    passage_encoder: str
    dim: int
    count: int
    metric: str
    index_factory: str
    query_prefix: str
    passage_prefix: str
    corpus: str
    seconds: float


def read_dense_info(index_dir: Path) -> DenseIndexInfo:
    path = index_dir / META_FILE
    if not path.is_file():
        raise RetrieverError(
            f"no dense index in {index_dir} (missing {META_FILE}); build one with "
            "DenseRetriever.build_index(corpus, dir) or `agentenvs retriever index`"
        )
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != FORMAT_VERSION:
        raise RetrieverError(f"{path}: unsupported dense index format {data.get('format')!r}")
    return DenseIndexInfo(**data)


def _chunks(items: Iterator[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    while chunk := list(islice(items, size)):
        yield chunk


def _corpus_of(source: RetrieverConfig | str | Path | None) -> Path:
    from agentenvs.envs.search_r1.corpus import resolve_corpus

    return resolve_corpus(source.corpus if isinstance(source, RetrieverConfig) else source)


def _option(config: RetrieverConfig | None, name: str, default: Any) -> Any:
    return config.options.get(name, default) if config is not None else default


def build_dense_index(
    source: RetrieverConfig | str | Path | None,
    out_dir: str | Path,
    progress: bool | ProgressCallback | None = None,
    *,
    model: str | Path | None = None,
    query_prefix: str | None = None,
    passage_prefix: str | None = None,
    index_factory: str | None = None,
    batch_size: int | None = None,
    overwrite: bool = False,
    encoder: Encoder | None = None,
) -> Path:
    """Embed every passage of a Search-R1 corpus and write a dense index folder.

    ``source`` is a corpus path (None = the shipped corpus) or a :class:`RetrieverConfig`
    whose ``corpus``, ``model``, prefixes, ``embed_batch_size`` and
    ``options["index_factory"]`` fill in what is not passed. ``encoder`` replaces the
    model for the passages only (precomputed or cheaper embeddings); queries are
    embedded with ``model`` at search time.
    """
    config = source if isinstance(source, RetrieverConfig) else None
    if config is not None:
        model = model if model is not None else config.model
        query_prefix = query_prefix if query_prefix is not None else config.query_prefix
        passage_prefix = passage_prefix if passage_prefix is not None else config.passage_prefix
        batch_size = batch_size or config.embed_batch_size
    query_prefix, passage_prefix = query_prefix or "", passage_prefix or ""
    index_factory = index_factory or _option(config, "index_factory", "Flat")
    batch_size = batch_size or 64
    corpus = _corpus_of(source)
    out = Path(out_dir).expanduser()
    if not corpus.is_file():
        raise RetrieverError(f"corpus file not found: {corpus}")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise RetrieverError(f"{out} exists and is not empty (pass overwrite=True to rebuild)")
    passage_encoder = encoder or SentenceEncoder(model, batch_size=batch_size)
    started = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    try:
        builder = FaissBuilder(passage_encoder.dim, index_factory)
        with PassageStoreWriter(work) as store, BuildProgress(progress) as bar:
            task = bar.task("dense index", count_lines(corpus))
            for chunk in _chunks(iter_passages(corpus), max(batch_size * 8, 256)):
                vectors = passage_encoder.encode([passage_prefix + text for _, text in chunk])
                builder.add(vectors)
                for passage_id, text in chunk:
                    store.add(passage_id, text)
                bar.advance(task, len(chunk), report=True)
            count = len(store)
        if count == 0:
            raise RetrieverError(f"corpus {corpus} has no passages")
        builder.save(work)
        info = DenseIndexInfo(
            kind="dense",
            format=FORMAT_VERSION,
            model=model_label(model),
            passage_encoder=passage_encoder.name,
            dim=passage_encoder.dim,
            count=count,
            metric="inner_product",
            index_factory=index_factory,
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
            corpus=str(corpus.resolve()),
            seconds=round(time.perf_counter() - started, 3),
        )
        (work / META_FILE).write_text(json.dumps(asdict(info), indent=2), encoding="utf-8")
        log.info("dense index of %d passages written to %s", count, out)
        if out.exists():
            shutil.rmtree(out)
        work.chmod(0o755)  # mkdtemp makes it private; an index is shared data
        work.rename(out)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def default_dense_index(config: RetrieverConfig) -> Path:
    """The cached index of ``config``'s corpus and model, built on first use."""
    from agentenvs.envs.search_r1.retrievers.cache import build_atomically, index_dir_for

    corpus = _corpus_of(config)
    if not corpus.is_file():
        raise RetrieverError(f"corpus file not found: {corpus}")
    settings = {
        "format": FORMAT_VERSION,
        "model": model_label(config.model),
        "passage_prefix": config.passage_prefix,
        "query_prefix": config.query_prefix,
        "index_factory": _option(config, "index_factory", "Flat"),
    }
    target = index_dir_for("dense", corpus, settings)
    if (target / META_FILE).is_file():
        return target
    return build_atomically(target, lambda tmp: build_dense_index(config, tmp))


def set_compute_threads(threads: int) -> None:
    """Threads torch and faiss use, for the whole process (both settings are global).

    On a machine with more busy processes than cores, OpenMP's spinning workers make
    small batches very slow (measured here: one query, 2 threads under load: ~1 s;
    1 thread: ~60 ms); ``threads=1`` avoids that.
    """
    import faiss
    import torch

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)


class DenseRetriever(Retriever):
    """Nearest passages by cosine similarity of sentence embeddings.

    ``source`` is an index folder, or a :class:`RetrieverConfig` (its ``index_dir``, or
    an index of its ``corpus`` built once into the cache; model, prefixes, batching and
    ``options`` ``ef_search``/``nprobe``/``threads`` come from it). ``threads`` sets
    torch's and faiss' thread counts process-wide (see :func:`set_compute_threads`);
    None leaves them alone.
    """

    def __init__(
        self,
        source: str | Path | RetrieverConfig,
        *,
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
        model: str | Path | None = None,
        batch_size: int = 64,
        batch_wait_ms: float = 2.0,
        ef_search: int | None = None,
        nprobe: int | None = None,
        encoder: Encoder | None = None,
        threads: int | None = None,
    ) -> None:
        if isinstance(source, RetrieverConfig):
            query_prefix, passage_prefix = source.query_prefix, source.passage_prefix
            model = source.model
            batch_size, batch_wait_ms = source.batch_size, source.batch_wait_ms
            ef_search = _option(source, "ef_search", None)
            nprobe = _option(source, "nprobe", None)
            threads = _option(source, "threads", None)
            index_dir: str | Path = source.index_dir or default_dense_index(source)
        else:
            index_dir = source
        self.index_dir = Path(index_dir).expanduser()
        self.info = read_dense_info(self.index_dir)
        self.query_prefix = self.info.query_prefix if query_prefix is None else query_prefix
        if query_prefix is not None and query_prefix != self.info.query_prefix:
            log.warning(
                "dense index %s was built for query prefix %r; searching with %r",
                self.index_dir,
                self.info.query_prefix,
                query_prefix,
            )
        if passage_prefix is not None and passage_prefix != self.info.passage_prefix:
            log.warning(
                "dense index %s embedded passages with prefix %r, not %r; rebuild it to change",
                self.index_dir,
                self.info.passage_prefix,
                passage_prefix,
            )
        if threads is not None:
            set_compute_threads(threads)
        self._index: Any = load_faiss_index(self.index_dir)
        tune_search(self._index, ef_search=ef_search, nprobe=nprobe)
        self._store = PassageStore(self.index_dir)
        if not self._index.ntotal == len(self._store) == self.info.count:
            raise RetrieverError(
                f"dense index {self.index_dir} is inconsistent: {self._index.ntotal} vectors, "
                f"{len(self._store)} passages, {self.info.count} recorded"
            )
        self.encoder: Encoder = encoder or SentenceEncoder(
            model if model is not None else self.info.model, batch_size=batch_size
        )
        if self.encoder.dim != self.info.dim:
            raise RetrieverError(
                f"model {self.encoder.name!r} makes {self.encoder.dim}-d vectors; "
                f"index {self.index_dir} holds {self.info.dim}-d ones"
            )
        # One worker: torch and faiss already use every core per call.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentenvs-dense")
        self._batched: BlockingSearch[Passage] = BlockingSearch(
            self.search_batch,
            lambda: self._worker,
            batch_size=batch_size,
            batch_wait_ms=batch_wait_ms,
        )

    @classmethod
    def build_index(
        cls,
        corpus_path: str | Path,
        out_dir: str | Path,
        *,
        progress: bool | ProgressCallback | None = True,
        model: str | Path | None = None,
        query_prefix: str = "",
        passage_prefix: str = "",
        index_factory: str = "Flat",
        batch_size: int = 64,
        overwrite: bool = False,
        encoder: Encoder | None = None,
    ) -> Path:
        """Embed a Search-R1 corpus JSONL into ``out_dir`` (see :func:`build_dense_index`)."""
        return build_dense_index(
            corpus_path,
            out_dir,
            progress,
            model=model,
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
            index_factory=index_factory,
            batch_size=batch_size,
            overwrite=overwrite,
            encoder=encoder,
        )

    def search_batch(self, queries: list[str], k: int) -> list[list[Passage]]:
        """Blocking batched search (``search`` runs it on the retriever's worker thread)."""
        results: list[list[Passage]] = [[] for _ in queries]
        live = [i for i, query in enumerate(queries) if query.strip()]
        if not live or k < 1:
            return results
        vectors = self.encoder.encode([self.query_prefix + queries[i] for i in live])
        scores, rows = self._index.search(vectors, min(k, self._index.ntotal))
        for slot, i in enumerate(live):
            for score, row in zip(scores[slot], rows[slot], strict=True):
                if row < 0:  # fewer neighbours than k (approximate indexes)
                    continue
                passage_id, contents = self._store.get(int(row))
                results[i].append(Passage(id=passage_id, contents=contents, score=float(score)))
        return results

    async def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        return await self._batched.search(queries, topk)

    def search_sync(self, queries: list[str], topk: int) -> list[list[Passage]]:
        """Blocking search from synchronous code (benchmarks, scripts)."""
        return self.search_batch(queries, topk)

    async def close(self) -> None:
        await self._batched.close()
