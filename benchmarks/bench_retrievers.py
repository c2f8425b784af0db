"""Search-R1 retrievers side by side: ``bm25`` (bm25s), ``lucene`` (pyserini), ``dense``.

One generated corpus (default 100,000 passages) and one query set (default 1,000),
searched by the three backends in the same process and run:

* index build time per backend;
* throughput: all queries in batches of ``--batch`` through the async ``search`` API;
* latency: the queries one at a time (p50/p99), micro-batch wait set to 0 for all;
* measurements interleaved batch by batch across backends (see :func:`measure`);
* ratios against ``lucene``;
* top-3 agreement of ``bm25`` with ``lucene`` (mean |top3 ∩ top3| / 3) and how often
  each finds the passage a query was drawn from.

The corpus is written by a seeded generator: made-up words from syllables
(Zipf-distributed, with inflections such as -s/-ed/-ing/-ness so stemming matters),
interleaved with English function words (so stop words matter), numbers and titles.
Queries take 2-5 content words of a random passage, often re-inflected, inside a
question frame.

Dense on this machine: embedding 100,000 passages with all-MiniLM-L6-v2 on 2 CPU cores
takes over an hour, so by default the 100k dense index holds *seeded random unit
vectors* for the passages (the cost of a Flat inner-product search does not depend on
the values), while queries are embedded by the real model at search time, exactly as
in use. The real build throughput is measured on the first ``--dense-sample``
passages and extrapolated. ``--dense-real`` embeds the whole corpus instead.

    python benchmarks/bench_retrievers.py                 # the RESULTS.md run
    python benchmarks/bench_retrievers.py --passages 20000 --queries 300 --skip-dense
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SEED = 2503  # Search-R1's arXiv number, for want of a better one

ONSETS = [
    "b",
    "br",
    "c",
    "ch",
    "d",
    "dr",
    "f",
    "fl",
    "g",
    "gr",
    "h",
    "j",
    "k",
    "l",
    "m",
    "n",
    "p",
    "pl",
    "qu",
    "r",
    "s",
    "sh",
    "st",
    "t",
    "th",
    "tr",
    "v",
    "w",
    "z",
]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "io"]
CODAS = ["", "", "", "n", "r", "l", "s", "nd", "st", "m", "k", "rt"]
SUFFIXES = ["s", "ed", "ing", "er", "ly", "ness", "ation", "ies", "ful", "ment"]
# English function words: the 33 Lucene stop words and common words that are not stop words.
FUNCTION_WORDS = [
    "a",
    "an",
    "and",
    "are",
    "as",
    "at",
    "be",
    "but",
    "by",
    "for",
    "if",
    "in",
    "into",
    "is",
    "it",
    "no",
    "not",
    "of",
    "on",
    "or",
    "such",
    "that",
    "the",
    "their",
    "then",
    "there",
    "these",
    "they",
    "this",
    "to",
    "was",
    "will",
    "with",
    "from",
    "which",
    "were",
    "has",
    "had",
    "its",
    "one",
    "after",
    "also",
    "his",
    "her",
    "who",
    "when",
    "where",
    "during",
    "between",
    "about",
    "over",
    "under",
    "most",
    "many",
    "first",
]
QUESTION_FRAMES = [
    "{}",
    "what is the {}",
    "who was {}",
    "which {} is in the {}",
    "when did the {} of {}",
    "where are the {} and {}",
]


# ---- corpus and queries ------------------------------------------------------------------


def make_vocabulary(rng: random.Random, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        syllables = rng.choices([1, 2, 3], weights=[2, 5, 3])[0]
        words.add(
            "".join(
                rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)
                for _ in range(syllables)
            )
        )
    ordered = sorted(words)  # a set's order depends on PYTHONHASHSEED; a sorted list does not
    rng.shuffle(ordered)
    return ordered


def inflect(rng: random.Random, word: str, rate: float) -> str:
    return word + rng.choice(SUFFIXES) if rng.random() < rate else word


def generate_corpus(path: Path, passages: int, seed: int = SEED) -> None:
    rng = random.Random(seed)
    vocab = make_vocabulary(rng, 40_000)
    cum = np.cumsum(1.0 / (np.arange(len(vocab)) + 8) ** 1.05).tolist()
    with path.open("w", encoding="utf-8") as out:
        for i in range(passages):
            title = " ".join(
                w.capitalize() for w in rng.choices(vocab, cum_weights=cum, k=rng.randint(1, 3))
            )
            tokens: list[str] = []
            for word in rng.choices(vocab, cum_weights=cum, k=rng.randint(28, 48)):
                tokens.append(inflect(rng, word, 0.3))
                if rng.random() < 0.45:
                    tokens.append(rng.choice(FUNCTION_WORDS))
                if rng.random() < 0.02:
                    tokens.append(str(rng.randint(1, 2030)))
                if rng.random() < 0.07:
                    tokens[-1] += "."
            text = " ".join(tokens)
            contents = f'"{title} ({i})"\n{text[0].upper()}{text[1:]}.'
            out.write(json.dumps({"id": f"doc{i}", "contents": contents}) + "\n")


def generate_queries(corpus: Path, count: int, seed: int = SEED) -> list[tuple[str, str]]:
    """(query, id of the passage it was drawn from)."""
    rng = random.Random(seed + 1)
    with corpus.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    picked = rng.sample(range(len(rows)), count)
    stop = set(FUNCTION_WORDS)
    queries = []
    for row_no in picked:
        row = rows[row_no]
        words = [w.strip(".").lower() for w in row["contents"].split("\n", 1)[1].split()]
        content = list(dict.fromkeys(w for w in words if w not in stop and not w.isdigit()))
        chosen = rng.sample(content, min(len(content), rng.randint(2, 5)))
        chosen = [inflect(rng, _strip_suffix(w), 0.4) for w in chosen]
        frame = rng.choice(QUESTION_FRAMES)
        slots = frame.count("{}")
        parts = [" ".join(chosen[i::slots]) for i in range(slots)]
        queries.append((frame.format(*parts), row["id"]))
    return queries


def _strip_suffix(word: str) -> str:
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if word.endswith(suffix) and len(word) > len(suffix) + 2:
            return word[: -len(suffix)]
    return word


# ---- measuring ---------------------------------------------------------------------------


@dataclass
class Run:
    name: str
    retriever: Any
    build_s: float
    note: str = ""
    meaningful_hits: bool = True  # False when passage vectors are stand-ins
    qps: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    top: list[list[str]] = field(default_factory=list)


def rotated(runs: list[Run], shift: int) -> list[Run]:
    shift %= len(runs)
    return runs[shift:] + runs[:shift]


async def measure(
    runs: list[Run], queries: list[str], batch: int, latency_n: int, passes: int
) -> None:
    """Throughput and latency of every backend, interleaved batch by batch.

    The machine is shared, so its load drifts; running the backends one after the
    other would hand each a different machine. Here every batch (and every latency
    query) goes to all backends in turn, in a rotating order, so drift hits all alike.
    Throughput is the best of ``passes`` passes.
    """
    chunks = [queries[i : i + batch] for i in range(0, len(queries), batch)]
    # Warm-up pass, untimed: the JVM's JIT, stemmer caches, first touches of mmaps.
    for chunk in chunks:
        for run in runs:
            await run.retriever.search(chunk, 3)
    for pass_no in range(passes):
        elapsed = dict.fromkeys((r.name for r in runs), 0.0)
        for i, chunk in enumerate(chunks):
            for run in rotated(runs, i):
                t0 = time.perf_counter()
                results = await run.retriever.search(chunk, 3)
                elapsed[run.name] += time.perf_counter() - t0
                if pass_no == 0:
                    run.top.extend([p.id for p in hits] for hits in results)
        for run in runs:
            run.qps = max(run.qps, len(queries) / elapsed[run.name])
    latencies: dict[str, list[float]] = {r.name: [] for r in runs}
    for i, query in enumerate(queries[:latency_n]):
        for run in rotated(runs, i):
            t0 = time.perf_counter()
            await run.retriever.search([query], 3)
            latencies[run.name].append((time.perf_counter() - t0) * 1000)
    for run in runs:
        values = np.asarray(latencies[run.name])
        run.p50_ms, run.p99_ms = float(np.percentile(values, 50)), float(np.percentile(values, 99))
        await run.retriever.close()


def agreement(a: list[list[str]], b: list[list[str]]) -> float:
    scores = []
    for x, y in zip(a, b, strict=True):
        sx, sy = set(x[:3]), set(y[:3])
        scores.append(1.0 if not sx and not sy else len(sx & sy) / max(len(sx), len(sy)))
    return float(np.mean(scores))


def source_hit_rate(top: list[list[str]], sources: list[str]) -> float:
    return float(np.mean([src in ids[:3] for ids, src in zip(top, sources, strict=True)]))


class RandomUnitVectors:
    """Stand-in passage encoder: seeded random unit vectors (see the module docstring)."""

    name = "random-unit-vectors (benchmark stand-in)"

    def __init__(self, dim: int, seed: int = SEED) -> None:
        self.dim = dim
        self._rng = np.random.default_rng(seed)

    def encode(self, texts: list[str]) -> np.ndarray:
        vectors = self._rng.standard_normal((len(texts), self.dim), dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


# ---- the three backends: build and open --------------------------------------------------


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - started


def open_bm25(corpus: Path, work: Path, args: argparse.Namespace, stemmer: str) -> Run:
    from agentenvs.envs.search_r1.retrievers.bm25 import BM25Retriever, build_bm25_index
    from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig

    out = work / f"bm25-{stemmer}"
    _, build_s = timed(build_bm25_index, corpus, out, stemmer=stemmer)
    config = RetrieverConfig(
        kind="bm25", index_dir=str(out), stemmer=stemmer, batch_size=args.batch, batch_wait_ms=0
    )
    name = "bm25" if stemmer == "porter" else f"bm25 ({stemmer} stemmer)"
    return Run(name, BM25Retriever(config), build_s)


def open_lucene(corpus: Path, work: Path, args: argparse.Namespace) -> Run:
    from agentenvs.envs.search_r1.retrievers.lucene import LuceneRetriever

    out = work / "lucene"
    _, build_s = timed(LuceneRetriever.build_index, corpus, out, progress=False)
    retriever, open_s = timed(
        LuceneRetriever, out, threads=2, batch_size=args.batch, batch_wait_ms=0
    )
    return Run(
        "lucene",
        retriever,
        build_s,
        note=f"first open {open_s:.1f} s (JVM start + pyserini import)",
    )


def open_dense(corpus: Path, work: Path, args: argparse.Namespace) -> Run:
    from agentenvs.envs.search_r1.retrievers.dense import DenseRetriever, set_compute_threads
    from agentenvs.envs.search_r1.retrievers.dense_encoder import SentenceEncoder

    if args.dense_threads is not None:
        set_compute_threads(args.dense_threads)
    sample = work / "dense-sample.jsonl"
    with corpus.open(encoding="utf-8") as src, sample.open("w", encoding="utf-8") as dst:
        for _, line in zip(range(args.dense_sample), src, strict=False):
            dst.write(line)
    SentenceEncoder()  # load the model outside the timed build
    _, sample_s = timed(DenseRetriever.build_index, sample, work / "dense-sample", progress=False)
    rate = args.dense_sample / sample_s
    out = work / "dense"
    if args.dense_real:
        _, build_s = timed(DenseRetriever.build_index, corpus, out, progress=True)
        note = f"real MiniLM build, {rate:.1f} passages/s on the sample"
    else:
        _, store_s = timed(
            DenseRetriever.build_index, corpus, out, progress=False, encoder=RandomUnitVectors(384)
        )
        build_s = args.passages / rate + store_s
        note = (
            f"build estimated: {args.dense_sample} passages embedded at {rate:.1f}/s, "
            f"extrapolated, + {store_s:.1f} s store/faiss; passage vectors are stand-ins"
        )
    name = "dense" if args.dense_threads is None else f"dense ({args.dense_threads} thread(s))"
    retriever = DenseRetriever(out, batch_size=args.batch, batch_wait_ms=0)
    return Run(name, retriever, build_s, note=note, meaningful_hits=args.dense_real)


# ---- report ------------------------------------------------------------------------------


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores {cpu}, Python {platform.python_version()}"


def report(
    runs: list[Run], sources: list[str], args: argparse.Namespace, load: tuple[float, float]
) -> str:
    base = next(r for r in runs if r.name == "lucene")
    lines = [
        f"Corpus: {args.passages:,} generated passages, {args.queries:,} queries, top-3; "
        f"throughput in batches of {args.batch} (best of {args.passes} passes); latency over "
        f"{args.latency_queries} single queries; backends interleaved batch by batch. "
        f"{machine()}; {time.strftime('%Y-%m-%d')}; load average {load[0]:.1f} before, {load[1]:.1f} after.",
        "",
        "| backend | index build | queries/s | vs lucene | p50 ms | p99 ms | p50 vs lucene | source passage in top-3 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        hits = f"{source_hit_rate(r.top, sources):.3f}" if r.meaningful_hits else "n/a (stand-ins)"
        lines.append(
            f"| {r.name} | {r.build_s:.1f} s | {r.qps:,.0f} | {r.qps / base.qps:.2f}x | "
            f"{r.p50_ms:.2f} | {r.p99_ms:.2f} | {r.p50_ms / base.p50_ms:.2f}x | {hits} |"
        )
    lines.append("")
    for r in runs:
        if r.name.startswith("bm25"):
            top1 = np.mean([a[:1] == b[:1] for a, b in zip(r.top, base.top, strict=True)])
            lines.append(
                f"- top-3 agreement {r.name} vs lucene: {agreement(r.top, base.top):.3f} "
                f"(top-1 identical: {top1:.3f})"
            )
    for r in runs:
        if r.note:
            lines.append(f"- {r.name}: {r.note}")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> None:
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-retrievers-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus.jsonl"
    load_before = os.getloadavg()[0]
    _, gen_s = timed(generate_corpus, corpus, args.passages)
    pairs = generate_queries(corpus, args.queries)
    queries, sources = [q for q, _ in pairs], [s for _, s in pairs]
    log(f"corpus {corpus} ({corpus.stat().st_size / 1e6:.0f} MB) generated in {gen_s:.1f} s")
    runs = [open_bm25(corpus, work, args, stemmer) for stemmer in args.bm25_stemmers.split(",")]
    runs.append(open_lucene(corpus, work, args))
    if not args.skip_dense:
        runs.append(open_dense(corpus, work, args))
    for run in runs:
        log(f"{run.name}: index built in {run.build_s:.1f} s")
    await measure(runs, queries, args.batch, args.latency_queries, args.passes)
    print(report(runs, sources, args, (load_before, os.getloadavg()[0])))
    if args.json:
        fields = ("name", "build_s", "qps", "p50_ms", "p99_ms", "note")
        Path(args.json).write_text(
            json.dumps([{k: getattr(r, k) for k in fields} for r in runs], indent=2)
        )


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument(
        "--batch", type=int, default=64, help="queries per search call (throughput)"
    )
    parser.add_argument("--latency-queries", type=int, default=500, help="single-query calls timed")
    parser.add_argument(
        "--bm25-stemmers", default="porter,english", help="bm25 runs, one per PyStemmer algorithm"
    )
    parser.add_argument(
        "--dense-sample", type=int, default=1_000, help="passages embedded for real"
    )
    parser.add_argument("--dense-real", action="store_true", help="embed the whole corpus (slow)")
    parser.add_argument("--skip-dense", action="store_true")
    parser.add_argument(
        "--dense-threads", type=int, help="torch/faiss threads (default: leave theirs)"
    )
    parser.add_argument("--passes", type=int, default=2, help="timed throughput passes")
    parser.add_argument("--workdir", help="keep corpus and indexes here (default: a temp folder)")
    parser.add_argument("--json", help="also write the figures here")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
