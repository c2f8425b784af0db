"""The retriever interface every Search-R1 backend implements (bm25, lucene, dense, http)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agentenvs.envs.errors import AgentEnvsError, TransientError


@dataclass
class Passage:
    """One retrieved passage, in Search-R1's corpus layout.

    ``contents`` is ``"Title"\\ntext`` as in Search-R1/FlashRAG corpora; ``score`` is
    None when the backend (or a remote server) gives none.
    """

    id: str
    contents: str
    score: float | None = None


class RetrieverError(AgentEnvsError, RuntimeError):
    """Retrieval failed (a dead server, a missing index); the message says which."""


class RetrieverUnavailable(RetrieverError, TransientError):
    """The retrieval service did not answer after its retries (down, restarting, busy):
    of the moment, so the collector retries the group with fresh envs."""


class QueryRejected(RetrieverError):
    """The server is up but refused this query (an HTTP error answer that other queries
    do not get): a fault of one episode's query, not of the retrieval service."""


class Retriever(ABC):
    """Batched search. Implementations are safe to call from many envs concurrently.

    Required: :meth:`search`. Optional, with defaults: :meth:`document_count`,
    :meth:`close`; a backend that can also search from synchronous code implements
    :class:`BlockingSearch`. Nothing else is looked for.
    """

    @abstractmethod
    async def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        """One ranked list per query, best first, at most ``topk`` long."""

    def document_count(self) -> int | None:
        """How many passages the index holds, or None when the backend cannot say
        cheaply (a remote server); the retrieval server's ``/health`` reports it."""
        return None

    async def close(self) -> None:
        """Release clients, JVMs are kept (pyjnius cannot restart one)."""


@runtime_checkable
class BlockingSearch(Protocol):
    """A retriever that also searches from synchronous code (benchmarks, scripts, a
    worker thread): the retrieval server hands its batches to :meth:`search_sync` in
    a thread instead of going through the async :meth:`Retriever.search`."""

    def search_sync(self, queries: list[str], topk: int) -> list[list[Passage]]: ...
