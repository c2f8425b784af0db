"""Corpus files in Search-R1/FlashRAG layout: one JSON object per line.

Each line is ``{"id": "...", "contents": "\\"Title\\"\\ntext"}`` (wiki-18 and the
shipped corpus both look like this). Files may be gzip-compressed. Reading streams
line by line, so a 21M-passage wiki-18 never sits in memory as Python objects here.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import IO

from agentenvs.envs.data_files import json_lines
from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.search_r1.retrievers.base import Passage

SHIPPED_CORPUS = "corpus.jsonl"


def data_path(name: str) -> Path:
    """A file shipped in ``agentenvs/envs/search_r1/data``."""
    return Path(str(resources.files("agentenvs.envs.search_r1").joinpath("data", name)))


def default_corpus_path() -> Path:
    return data_path(SHIPPED_CORPUS)


def resolve_corpus(path: str | Path | None) -> Path:
    return default_corpus_path() if path is None else Path(path).expanduser()


class CorpusError(AgentEnvsError, ValueError):
    """A corpus file that cannot be read; the message names the file and line."""


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def iter_corpus(path: str | Path | None = None) -> Iterator[Passage]:
    """Passages of a corpus file, in file order. ``id`` falls back to the line number."""
    file = resolve_corpus(path)
    if not file.is_file():
        raise CorpusError(f"corpus file not found: {file}")
    with _open_text(file) as handle:
        for number, row in json_lines(handle, lambda n: f"{file}:{n}", CorpusError):
            contents = row.get("contents")
            if contents is None and "text" in row:  # FlashRAG variant: separate title/text
                title = row.get("title", "")
                contents = f'"{title}"\n{row["text"]}' if title else str(row["text"])
            if not isinstance(contents, str):
                raise CorpusError(f"{file}:{number}: no 'contents' string")
            yield Passage(id=str(row.get("id", number - 1)), contents=contents)


def load_corpus(path: str | Path | None = None) -> list[Passage]:
    return list(iter_corpus(path))


def split_title(contents: str) -> tuple[str, str]:
    """(first line, the rest), the way Search-R1 splits a passage into title and text."""
    title, _, text = contents.partition("\n")
    return title, text
