"""A client for any Search-R1-compatible retrieval server.

Wire format (Search-R1's ``retrieval_server.py``, verl's search tool)::

    POST /retrieve {"queries": [...], "topk": k, "return_scores": true}
    -> {"result": [[{"document": {"id": ..., "contents": ...}, "score": ...}, ...], ...]}

Without scores a server may return the documents themselves instead of
``{"document", "score"}`` pairs; both shapes are read. Searches from many envs are
micro-batched into one request; at most ``max_concurrency`` requests are in flight.
Connection errors, timeouts, 429 and 5xx answers are retried with exponential
backoff; after the last retry every caller of the batch gets a :class:`RetrieverError`
naming the URL and the cause. An HTTP error answer may be about one query rather than
the server (Search-R1's own server answers 500 to a query of more than 1024 distinct
terms), so a batch that ends on one is split: each query is sent alone, and a query
that still fails while the server answers others (or a probe query) gets
:class:`QueryRejected`, its caller only; the rest get their results. The time any search can take is bounded by
``(max_retries + 1) * timeout_s`` plus the backoff delays: nothing waits forever.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import httpx

from agentenvs.envs.search_r1.retrievers.base import (
    Passage,
    QueryRejected,
    Retriever,
    RetrieverError,
    RetrieverUnavailable,
)
from agentenvs.envs.search_r1.retrievers.batching import MicroBatcher, PerLoop
from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig

logger = logging.getLogger(__name__)

_RETRY_STATUS = {429, 500, 502, 503, 504}


PROBE_QUERY = "information"
"""A plain query sent to tell a refused query from a server that refuses everything."""


class _StatusError(RetrieverError):
    """The server answered with an HTTP error status (it is up, the request failed);
    :attr:`status` is that status."""


class _Rejected(list):
    """The hits slot of a query the server refused; ``search`` raises for its caller."""

    def __init__(self, reason: str, status: int | None) -> None:
        super().__init__()
        self.reason = reason
        self.status = status


@dataclass
class _LoopState:
    client: httpx.AsyncClient
    batcher: MicroBatcher[tuple[str, int], list[Passage]]


class HttpRetriever(Retriever):
    def __init__(self, config: RetrieverConfig) -> None:
        self.config = config
        self.url = config.url
        self._state: PerLoop[_LoopState] = PerLoop(self._new_state)

    def _new_state(self) -> _LoopState:
        cfg = self.config
        client = httpx.AsyncClient(
            timeout=httpx.Timeout(cfg.timeout_s),
            limits=httpx.Limits(
                max_connections=cfg.max_concurrency, max_keepalive_connections=cfg.max_concurrency
            ),
        )
        batcher: MicroBatcher[tuple[str, int], list[Passage]] = MicroBatcher(
            self._post_batch,
            max_batch=cfg.batch_size,
            max_wait_s=cfg.batch_wait_ms / 1000,
            max_concurrency=cfg.max_concurrency,
        )
        return _LoopState(client, batcher)

    async def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        found = await self._state.get().batcher.submit([(q, topk) for q in queries])
        for hits in found:
            if isinstance(hits, _Rejected):
                raise QueryRejected(hits.reason, status=hits.status)
        return found

    async def _post_batch(self, items: list[tuple[str, int]]) -> list[list[Passage]]:
        k = max(topk for _, topk in items)
        queries = [q for q, _ in items]
        try:
            result = await self.post(queries, k)
        except _StatusError as err:
            result = await self._isolate(queries, k, err)
        return [
            hits if isinstance(hits, _Rejected) else hits[:topk]
            for hits, (_, topk) in zip(result, items, strict=True)
        ]

    async def _isolate(
        self, queries: list[str], topk: int, batch_error: _StatusError
    ) -> list[list[Passage]]:
        """Each query alone, after a batch ended on an HTTP error status.

        Queries refused alone are rejected only if the server answers something: another
        query here, or the probe. A server that refuses everything fails every caller.
        """
        answers: list[list[Passage] | _StatusError] = []
        for query in queries:
            try:
                answers.append((await self.post([query], topk))[0])
            except _StatusError as err:
                answers.append(err)
        refused = [a for a in answers if isinstance(a, _StatusError)]
        if refused and len(refused) == len(answers):
            try:
                await self.post([PROBE_QUERY], 1)
            except _StatusError:
                raise batch_error from None
        return [_Rejected(str(a), a.status) if isinstance(a, _StatusError) else a for a in answers]

    async def post(self, queries: list[str], topk: int) -> list[list[Passage]]:
        """One request (with retries) for ``queries``; no batching."""
        cfg = self.config
        client = self._state.get().client
        payload = {"queries": queries, "topk": topk, "return_scores": True}
        attempts = cfg.max_retries + 1
        last_error = "no attempt made"
        status_failed = False  # did the last attempt get an HTTP answer (the server is up)?
        last_status: int | None = None  # that answer's status, when there was one
        for attempt in range(attempts):
            if attempt:
                delay = cfg.retry_backoff_s * 2 ** (attempt - 1)
                logger.warning(
                    "retrieval server %s: %s; retry %d/%d in %.2fs",
                    self.url, last_error, attempt, cfg.max_retries, delay,
                )  # fmt: skip
                await asyncio.sleep(delay)
            try:
                response = await client.post(self.url, json=payload)
            except httpx.TimeoutException:
                last_error = f"no answer within {cfg.timeout_s:g}s"
                status_failed, last_status = False, None
                continue
            except httpx.TransportError as err:
                last_error = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
                status_failed, last_status = False, None
                continue
            if response.status_code in _RETRY_STATUS:
                last_error = f"HTTP {response.status_code} {response.text[:200]!r}"
                # 500 may be about the query; 429, 502-504 are about the server.
                status_failed = response.status_code == 500
                last_status = response.status_code
                continue
            if response.status_code != 200:
                raise _StatusError(
                    f"retrieval server {self.url} refused the request: HTTP "
                    f"{response.status_code} {response.text[:200]!r}",
                    status=response.status_code,
                )
            try:
                return parse_response(response.json(), len(queries))
            except ValueError as err:
                raise RetrieverError(f"retrieval server {self.url}: {err}") from None
        error = _StatusError if status_failed else RetrieverUnavailable
        raise error(
            f"retrieval server {self.url} is unavailable after {attempts} attempt(s): {last_error}",
            status=last_status,
        )

    async def close(self) -> None:
        state = self._state.pop_current()
        if state is not None:
            await state.batcher.close()
            await state.client.aclose()


def parse_response(data: Any, n_queries: int) -> list[list[Passage]]:
    """The ``result`` of a /retrieve answer as passages; ValueError if it is malformed."""
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise ValueError("answer has no 'result' list")
    result = data["result"]
    if len(result) != n_queries:
        raise ValueError(f"answer has {len(result)} result lists for {n_queries} queries")
    out: list[list[Passage]] = []
    for hits in result:
        if not isinstance(hits, list):
            raise ValueError("a result entry is not a list")
        passages = []
        for item in hits:
            if not isinstance(item, dict):
                raise ValueError("a hit is not an object")
            doc = item.get("document", item)
            if not isinstance(doc, dict):
                raise ValueError("a hit's 'document' is not an object")
            contents = doc.get("contents")
            if contents is None:  # FlashRAG variant with separate fields
                title, text = doc.get("title"), doc.get("text", "")
                contents = f'"{title}"\n{text}' if title else str(text)
            score = item.get("score") if "document" in item else None
            passages.append(
                Passage(
                    id=str(doc.get("id", "")),
                    contents=str(contents),
                    score=float(score) if isinstance(score, int | float) else None,
                )
            )
        out.append(passages)
    return out
