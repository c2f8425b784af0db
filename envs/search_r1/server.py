"""A Search-R1-compatible retrieval server over any local backend.

``POST /retrieve`` takes ``{"queries": [...], "topk": k, "return_scores": bool}`` and
answers ``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}`` (with
``return_scores`` false, each hit is the document itself), exactly what Search-R1's
``retrieval_server.py`` serves, so Search-R1's training code, verl's search tool and
this project's ``http`` retriever all use it unchanged. ``GET /health`` reports the
backend and corpus size.

Concurrent requests are micro-batched: queries arriving within ``batch_wait_ms`` go
to the backend as one batch, run in a worker thread so the event loop keeps
accepting connections.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import Response

from agentenvs.envs.search_r1.retrievers.base import (
    BlockingSearch,
    Passage,
    Retriever,
    RetrieverError,
)
from agentenvs.envs.search_r1.retrievers.batching import TopKBatcher
from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig

MAX_TOPK = 1000


@dataclass(frozen=True)
class RetrieveRequest:
    """``{"queries": [...], "topk": k, "return_scores": bool}``; topk and scores optional."""

    queries: list[str]
    topk: int | None = None
    return_scores: bool = False

    @classmethod
    def parse(cls, raw: bytes) -> RetrieveRequest:
        try:
            data = _loads(raw)
        except Exception:
            raise ValueError("the body is not JSON") from None
        if not isinstance(data, dict):
            raise ValueError("the body must be a JSON object")
        queries = data.get("queries")
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            raise ValueError("'queries' must be a list of strings")
        topk = data.get("topk")
        if topk is not None and (
            isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK
        ):
            raise ValueError(f"'topk' must be an integer from 1 to {MAX_TOPK}")
        return cls(queries, topk, bool(data.get("return_scores", False)))


def _loads(raw: bytes) -> Any:
    try:
        import orjson

        return orjson.loads(raw)
    except ImportError:  # pragma: no cover
        return json.loads(raw)


def _dumps(data: Any) -> bytes:
    try:
        import orjson

        return orjson.dumps(data)
    except ImportError:  # pragma: no cover - orjson is optional, only faster
        return json.dumps(data, ensure_ascii=False).encode()


def _hit(passage: Passage, with_score: bool) -> dict[str, Any]:
    document = {"id": passage.id, "contents": passage.contents}
    if not with_score:
        return document
    return {"document": document, "score": passage.score if passage.score is not None else 0.0}


class BatchedBackend:
    """Runs a retriever's searches in batches, in a worker thread when it can."""

    def __init__(self, retriever: Retriever, config: RetrieverConfig) -> None:
        self.retriever = retriever
        self.config = config
        self._sync = retriever.search_sync if isinstance(retriever, BlockingSearch) else None
        self._batcher: TopKBatcher[Passage] = TopKBatcher(
            self._search_at_k,
            max_batch=config.batch_size,
            max_wait_s=config.batch_wait_ms / 1000,
            max_concurrency=1 if self._sync else None,
        )

    async def _search_at_k(self, queries: list[str], k: int) -> list[list[Passage]]:
        if self._sync is not None:
            return await asyncio.to_thread(self._sync, queries, k)
        return await self.retriever.search(queries, k)

    async def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        return await self._batcher.search(queries, topk)


def create_app(
    retriever: Retriever, config: RetrieverConfig | None = None, *, backend_name: str = ""
) -> FastAPI:
    config = config or RetrieverConfig()
    backend = BatchedBackend(retriever, config)
    app = FastAPI(title="agentenvs retrieval server", docs_url=None, redoc_url=None)

    @app.post("/retrieve")
    async def retrieve(request: Request) -> Response:
        # Parsed by hand (orjson + a few checks): FastAPI's body-model machinery cost
        # more per request than the search itself.
        try:
            body = RetrieveRequest.parse(await request.body())
        except ValueError as err:
            return Response(
                _dumps({"detail": str(err)}), status_code=422, media_type="application/json"
            )
        topk = body.topk or config.topk
        try:
            found = await backend.search(body.queries, topk)
        except RetrieverError as err:
            raise HTTPException(status_code=503, detail=str(err)) from err
        result = [[_hit(p, body.return_scores) for p in hits] for hits in found]
        return Response(_dumps({"result": result}), media_type="application/json")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        size = retriever.document_count()
        return {"status": "ok", "backend": backend_name or config.kind, "documents": size}

    return app


def serve(
    retriever: Retriever,
    config: RetrieverConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "warning",
) -> None:
    """Serve until interrupted (blocking)."""
    import uvicorn

    app = create_app(retriever, config, backend_name=config.kind)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
