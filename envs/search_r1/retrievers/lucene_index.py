"""Build a Lucene BM25 index from a Search-R1 corpus with Anserini's indexer.

The index is what ``python -m pyserini.index.lucene -collection JsonCollection
-generator DefaultLuceneDocumentGenerator -storePositions -storeDocvectors -storeRaw``
makes (the command Search-R1 documents for its BM25 runs), so Search-R1's own retrieval
server can open it too. Two steps, each with a progress bar:

1. the corpus is rewritten as a JsonCollection (``{"id", "contents"}`` per line) split
   into shards, because Anserini indexes one file per thread;
2. Anserini's ``IndexCollection`` runs in a child ``java`` process (no JVM in this
   process, so building never fixes the JVM options of the caller), and its per-shard
   "docs added" log lines drive the bar.

The index is built in a sibling temporary folder and renamed into place at the end: an
interrupted build never leaves a half index that looks finished.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections import deque
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

from agentenvs.envs.search_r1.retrievers.base import RetrieverError
from agentenvs.envs.search_r1.retrievers.indexing import (
    BuildProgress,
    ProgressCallback,
    count_lines,
    iter_passages,
)
from agentenvs.envs.search_r1.retrievers.lucene_jvm import anserini_jar, java_command

META_FILE = "agentenvs_index.json"
FORMAT_VERSION = 1
INDEXER_CLASS = "io.anserini.index.IndexCollection"
SHARD_DOCS = 20_000
_DOCS_ADDED = re.compile(r":\s*([\d,]+) docs added")
_TOTAL_INDEXED = re.compile(r"Indexing Complete! ([\d,]+) documents indexed")


@dataclass
class LuceneIndexInfo:
    """What ``agentenvs_index.json`` records next to the Lucene files."""

    kind: str
    format: int
    corpus: str
    documents: int
    seconds: float
    anserini: str
    analyzer: str = "Anserini DefaultEnglishAnalyzer (lowercase, Lucene English stopwords, Porter)"


def write_collection(
    corpus: Path, folder: Path, *, total: int, progress: BuildProgress, shard_docs: int = SHARD_DOCS
) -> int:
    """Rewrite the corpus as JsonCollection shards; returns the number of passages."""
    task = progress.task("collection", total)
    written = 0
    with ExitStack() as stack:
        shard: IO[str] | None = None
        for doc_id, contents in iter_passages(corpus):
            if written % shard_docs == 0:
                stack.close()
                shard = stack.enter_context(
                    (folder / f"docs{written // shard_docs:05d}.jsonl").open("w", encoding="utf-8")
                )
            assert shard is not None
            shard.write(json.dumps({"id": doc_id, "contents": contents}, ensure_ascii=False))
            shard.write("\n")
            written += 1
            if written % 1000 == 0:
                progress.advance(task, 1000)
    progress.finish(task, written)
    return written


def run_indexer(
    collection: Path, index: Path, *, documents: int, threads: int, progress: BuildProgress
) -> int:
    """Run Anserini's IndexCollection in a child JVM; returns the documents it indexed."""
    argv = java_command(
        INDEXER_CLASS,
        *("-collection", "JsonCollection", "-input", str(collection), "-index", str(index)),
        *("-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads)),
        *("-storePositions", "-storeDocvectors", "-storeRaw"),
        *("-memoryBuffer", "1024", "-verbose"),
    )
    task = progress.task("lucene index", documents)
    tail: deque[str] = deque(maxlen=30)
    indexed: int | None = None
    done = 0
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                tail.append(line.rstrip())
                if match := _DOCS_ADDED.search(line):
                    added = int(match[1].replace(",", ""))
                    progress.advance(task, added, report=True)
                    done += added
                elif match := _TOTAL_INDEXED.search(line):
                    indexed = int(match[1].replace(",", ""))
        except BaseException:  # interrupted or a failing callback: do not leave java running
            proc.kill()
            raise
        code = proc.wait()
    if code != 0 or indexed is None:
        log = "\n".join(tail)
        raise RetrieverError(f"Anserini indexer failed (exit code {code}):\n{log}")
    progress.advance(task, documents - done, report=True)  # documents Anserini skipped
    return indexed


def write_lucene_index(
    corpus_path: str | Path,
    out_dir: str | Path,
    *,
    threads: int | None = None,
    progress: bool | ProgressCallback | None = True,
    overwrite: bool = False,
    shard_docs: int = SHARD_DOCS,
) -> LuceneIndexInfo:
    """Index ``corpus_path`` into ``out_dir`` (a Lucene index folder pyserini can open).

    ``out_dir`` may be missing or empty; a non-empty one is replaced only with
    ``overwrite``."""
    corpus = Path(corpus_path).expanduser()
    out = Path(out_dir).expanduser()
    if not corpus.is_file():
        raise RetrieverError(f"corpus file not found: {corpus}")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise RetrieverError(f"{out} exists and is not empty (pass overwrite=True to rebuild)")
    threads = threads or max(1, os.cpu_count() or 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    try:
        collection, index = work / "collection", work / "index"
        collection.mkdir()
        with BuildProgress(progress) as bar:
            total = count_lines(corpus)
            written = write_collection(
                corpus, collection, total=total, progress=bar, shard_docs=shard_docs
            )
            if written == 0:
                raise RetrieverError(f"corpus {corpus} has no passages")
            indexed = run_indexer(
                collection, index, documents=written, threads=threads, progress=bar
            )
        info = LuceneIndexInfo(
            kind="lucene",
            format=FORMAT_VERSION,
            corpus=str(corpus.resolve()),
            documents=indexed,
            seconds=round(time.perf_counter() - started, 3),
            anserini=anserini_jar().name,
        )
        (index / META_FILE).write_text(json.dumps(asdict(info), indent=2), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        index.chmod(0o755)
        index.rename(out)
        return info
    finally:
        shutil.rmtree(work, ignore_errors=True)


def read_index_info(index_dir: str | Path) -> LuceneIndexInfo | None:
    """The build record of an index made here (None for an index built elsewhere)."""
    path = Path(index_dir) / META_FILE
    if not path.is_file():
        return None
    return LuceneIndexInfo(**json.loads(path.read_text(encoding="utf-8")))
