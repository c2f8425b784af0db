"""What every index build shares: progress reporting and reading the corpus file.

Used by the Lucene (:mod:`.lucene_index`) and dense (:mod:`.dense`) builders alike.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from agentenvs.envs.search_r1.retrievers.base import RetrieverError

ProgressCallback = Callable[[int], None]
"""Called with the number of passages just processed (the CLI drives its own bar)."""


class BuildProgress:
    """Where an index build reports progress: a rich bar (``True``), the caller's
    callback, or nowhere (``False``/``None``). Only steps that process passages
    (``report=True``) reach the callback, so its counts add up to the corpus size."""

    def __init__(self, progress: bool | ProgressCallback | None) -> None:
        self._callback = progress if callable(progress) else None
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            disable=progress is not True,
        )

    def task(self, description: str, total: int | None) -> int:
        return int(self._bar.add_task(description, total=total))

    def advance(self, task: int, passages: int, *, report: bool = False) -> None:
        if passages <= 0:
            return
        self._bar.advance(task, passages)  # type: ignore[arg-type]
        if report and self._callback is not None:
            self._callback(passages)

    def finish(self, task: int, done: int) -> None:
        self._bar.update(task, completed=done, total=done)  # type: ignore[arg-type]

    def __enter__(self) -> BuildProgress:
        self._bar.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._bar.__exit__(kind, err, tb)


def _open_corpus(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")


def count_lines(path: Path) -> int:
    """Non-blank lines of a (possibly gzipped) JSONL file, for the progress total."""
    with _open_corpus(path) as handle:
        return sum(1 for line in handle if line.strip())


def iter_passages(path: Path) -> Iterator[tuple[str, str]]:
    """(id, contents) of a corpus file, read with the shared Search-R1 corpus reader."""
    from agentenvs.envs.search_r1.corpus import CorpusError, iter_corpus

    try:
        for passage in iter_corpus(path):
            yield passage.id, passage.contents
    except CorpusError as err:
        raise RetrieverError(str(err)) from err
