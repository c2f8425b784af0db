"""``agentenvs retriever ...``: build indexes, serve them, query them.

The main CLI mounts :data:`app` as ``retriever``; ``python -m
agentenvs.envs.search_r1.cli`` runs it on its own.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig

# The retriever modules (pydantic configs, backends) are imported inside the commands:
# the main CLI mounts this app, so anything imported here is paid by every command.


def _errors() -> tuple[type[Exception], ...]:
    from agentenvs.envs.search_r1.corpus import CorpusError
    from agentenvs.envs.search_r1.retrievers.base import RetrieverError

    return RetrieverError, CorpusError


app = typer.Typer(
    help="Search-R1 retrievers: build an index, serve it over HTTP, try a query.",
    no_args_is_help=True,
)
console = Console(stderr=True)

Backend = Annotated[str, typer.Option("--backend", "-b", help="bm25, lucene or dense.")]
CorpusOpt = Annotated[
    Path | None,
    typer.Option("--corpus", help="Corpus JSONL (Search-R1 layout); default: the shipped one."),
]
IndexOpt = Annotated[
    Path | None, typer.Option("--index", help="A prebuilt index folder (retriever index).")
]
ModelOpt = Annotated[str | None, typer.Option("--model", help="dense: embedding model.")]


def _config(
    backend: str, corpus: Path | None, index: Path | None, **extra: object
) -> RetrieverConfig:
    if backend not in ("bm25", "lucene", "dense"):
        raise typer.BadParameter(f"unknown backend {backend!r}; choose bm25, lucene or dense")
    from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig

    fields = {k: v for k, v in extra.items() if v is not None}
    return RetrieverConfig(
        kind=backend,  # type: ignore[arg-type]
        corpus=str(corpus) if corpus else None,
        index_dir=str(index) if index else None,
        **fields,
    )


def _fail(message: str) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}")
    return typer.Exit(code=1)


def _count_lines(path: Path) -> int | None:
    if path.suffix == ".gz" or not path.is_file():
        return None
    with path.open("rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))


@app.command()
def index(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the index into.")],
    backend: Backend = "bm25",
    corpus: CorpusOpt = None,
    model: ModelOpt = None,
    stemmer: Annotated[
        str | None, typer.Option(help="bm25: PyStemmer algorithm (porter matches Lucene).")
    ] = "porter",
) -> None:
    """Build a backend's index from a corpus JSONL, with a progress bar."""
    from agentenvs.envs.search_r1.corpus import resolve_corpus
    from agentenvs.envs.search_r1.retrievers import build_index

    cfg = _config(backend, corpus, None, model=model, stemmer=stemmer)
    source = resolve_corpus(cfg.corpus)
    if not source.is_file():
        raise _fail(f"corpus file not found: {source}")
    if out.exists() and any(out.iterdir()):
        raise _fail(f"{out} is not empty; choose a new folder")
    created = not out.exists()
    total = _count_lines(source)
    columns = [TextColumn("[bold]indexing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("index", total=total)
        try:
            built = build_index(cfg, out, lambda n: progress.advance(task, n))
        except _errors() as err:
            if created:  # leave no half-written index behind
                shutil.rmtree(out, ignore_errors=True)
            raise _fail(str(err)) from None
    console.print(f"[green]{backend} index written to[/green] {built}")


@app.command()
def serve(
    backend: Backend = "bm25",
    index: IndexOpt = None,
    corpus: CorpusOpt = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    topk: Annotated[int, typer.Option(help="Default passages per query.")] = 3,
    model: ModelOpt = None,
    batch_size: Annotated[int, typer.Option(help="Most queries per backend batch.")] = 64,
    batch_wait_ms: Annotated[float, typer.Option(help="Wait for more queries (ms).")] = 2.0,
) -> None:
    """Serve POST /retrieve (Search-R1's contract) over a local backend."""
    from agentenvs.envs.search_r1.retrievers import make_retriever
    from agentenvs.envs.search_r1.server import serve as run_server

    cfg = _config(
        backend, corpus, index, model=model, topk=topk, batch_size=batch_size,
        batch_wait_ms=batch_wait_ms,
    )  # fmt: skip
    try:
        retriever = make_retriever(cfg)
    except _errors() as err:
        raise _fail(str(err)) from None
    console.print(f"serving {backend} on http://{host}:{port}/retrieve")
    run_server(retriever, cfg, host=host, port=port)


@app.command()
def query(
    queries: Annotated[list[str], typer.Argument(help="One or more queries.")],
    backend: Annotated[
        str, typer.Option("--backend", "-b", help="bm25, lucene, dense or http.")
    ] = "bm25",
    index: IndexOpt = None,
    corpus: CorpusOpt = None,
    url: Annotated[str | None, typer.Option(help="http: the /retrieve URL.")] = None,
    topk: Annotated[int, typer.Option(help="Passages per query.")] = 3,
) -> None:
    """Search and print the hits as JSON lines (a quick check of an index or server)."""
    from agentenvs.envs.search_r1.retrievers import make_retriever
    from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig

    if backend == "http":
        cfg = RetrieverConfig(kind="http", topk=topk, **({"url": url} if url else {}))
    else:
        cfg = _config(backend, corpus, index, topk=topk)

    async def run() -> list:
        retriever = make_retriever(cfg, cached=False)
        try:
            return await retriever.search(list(queries), topk)
        finally:
            await retriever.close()

    try:
        found = asyncio.run(run())
    except _errors() as err:
        raise _fail(str(err)) from None
    for q, hits in zip(queries, found, strict=True):
        rows = [{"id": p.id, "score": p.score, "contents": p.contents} for p in hits]
        typer.echo(json.dumps({"query": q, "hits": rows}, ensure_ascii=False))


if __name__ == "__main__":
    from agentenvs.envs.cli_logging import quiet_logging

    quiet_logging()
    app()
