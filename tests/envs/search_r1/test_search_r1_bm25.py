"""The bm25 retriever: index build, memory-mapped load, ranking, analysis."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from agentenvs.envs.search_r1.retrievers import RetrieverConfig, make_retriever
from agentenvs.envs.search_r1.retrievers.bm25 import (
    Analyzer,
    BM25Retriever,
    build_bm25_index,
    top_k,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5]), min_size=1, max_size=60),
    st.integers(min_value=1, max_value=40),
)
def test_top_k_is_the_stable_sort_of_positive_scores(values, k):
    scores = np.array(values, dtype=np.float32)
    expected = [
        i for i in sorted(range(len(values)), key=lambda i: (-values[i], i)) if values[i] > 0
    ][:k]
    assert top_k(scores, k) == expected
    assert scores.tolist() == values  # the caller's scores are left alone


def test_ranking_matches_bm25s_own_scores():
    retriever = make_retriever(RetrieverConfig())
    assert isinstance(retriever, BM25Retriever)
    model = retriever.model
    for query in ["who founded Peverell", "River Sella empties", "lighthouse designed engineer"]:
        hits = retriever.search_sync([query], 5)[0]
        docs, scores = model.retrieve([retriever.analyzer.terms(query)], k=5, show_progress=False)
        assert [h.score for h in hits] == sorted(scores[0].tolist(), reverse=True)
        # The best passage is bm25s's best; where several tie on the top score (bm25s
        # orders ties as its partition left them), ours is the lowest row of them.
        rows = {str(p["id"]): row for row, p in enumerate(retriever.passages)}
        tied = [int(d) for d, s in zip(docs[0], scores[0], strict=True) if s == scores[0][0]]
        assert rows[hits[0].id] <= min(tied)  # bm25s returns only k of the tied rows
        assert scores[0][0] == hits[0].score


def test_index_is_built_once_and_loaded_memory_mapped(tmp_path):
    corpus = tmp_path / "c.jsonl"
    rows = [
        {"id": "a", "contents": '"Running"\nThe runners were running fast.'},
        {"id": "b", "contents": '"Boats"\nA boat sails on the river.'},
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = build_bm25_index(corpus, tmp_path / "idx")
    retriever = BM25Retriever(RetrieverConfig(index_dir=str(out)))
    assert isinstance(retriever.model.scores["data"], np.memmap)
    assert len(retriever) == 2
    (hit,) = retriever.search_sync(["run"], 3)[0]  # stemming: run ~ running/runners
    assert hit.id == "a" and hit.contents.startswith('"Running"')
    assert retriever.search_sync(["the and of"], 3) == [[]]  # stop words only: no hits
    assert json.loads((out / "agentenvs_analyzer.json").read_text())["stemmer"] == "porter"


def test_analyzer_without_stemming():
    assert Analyzer(stemmer=None).terms("The Runners, running!") == ["runners", "running"]
    assert Analyzer().terms("The Runners, running!") == ["runner", "run"]


def test_gzipped_and_title_text_corpora_are_read(tmp_path):
    import gzip

    from agentenvs.envs.search_r1.corpus import load_corpus

    path = tmp_path / "wiki.jsonl.gz"
    with gzip.open(path, "wt") as handle:
        handle.write(json.dumps({"id": "w1", "contents": '"Alpha"\nfirst passage'}) + "\n\n")
        handle.write(json.dumps({"id": "w2", "title": "Beta", "text": "second passage"}) + "\n")
    passages = load_corpus(path)
    assert [p.contents for p in passages] == ['"Alpha"\nfirst passage', '"Beta"\nsecond passage']
    retriever = BM25Retriever(
        RetrieverConfig(index_dir=str(build_bm25_index(path, tmp_path / "i")))
    )
    assert retriever.search_sync(["beta"], 3)[0][0].id == "w2"
