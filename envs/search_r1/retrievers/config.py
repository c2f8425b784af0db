"""RetrieverConfig: one pydantic model that selects and configures any retriever backend.

Every backend (``bm25``, ``lucene``, ``dense``, ``http``) is constructed from this same
model, so one config travels unchanged from the env config, the CLI and the server.
Backend-specific fields are ignored by the backends that do not use them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RetrieverKind = Literal["bm25", "lucene", "dense", "http"]

DEFAULT_URL = "http://127.0.0.1:8000/retrieve"


class RetrieverConfig(BaseModel):
    """Which retriever, over which corpus and index, with which knobs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: RetrieverKind = "bm25"
    corpus: str | None = Field(
        None,
        description="Corpus JSONL in Search-R1 layout ({'id', 'contents': '\"Title\"\\ntext'}); "
        "None is the small corpus shipped with agentenvs.",
    )
    index_dir: str | None = Field(
        None,
        description="A prebuilt index (agentenvs retriever index). None builds one from the "
        "corpus on first use into $AGENTENVS_CACHE (or ~/.cache/agentenvs) and reuses it.",
    )
    topk: int = Field(3, ge=1, description="Passages per query.")

    # ---- bm25 / lucene --------------------------------------------------------------
    k1: float = Field(0.9, gt=0, description="BM25 k1 (Lucene/pyserini default 0.9).")
    b: float = Field(0.4, ge=0, le=1, description="BM25 b (Lucene/pyserini default 0.4).")
    stemmer: str | None = Field(
        "porter",
        description="bm25: PyStemmer algorithm, used when PyStemmer is installed. Porter is "
        "what Lucene's English analyzer uses; it gives 0.98 top-3 agreement with lucene.",
    )
    threads: int = Field(1, ge=1, description="Search threads for backends that use them.")

    # ---- dense ----------------------------------------------------------------------
    model: str | None = Field(None, description="dense: embedding model name or path.")
    query_prefix: str = Field("", description="dense: prepended to queries (e5: 'query: ').")
    passage_prefix: str = Field("", description="dense: prepended to passages ('passage: ').")
    embed_batch_size: int = Field(64, ge=1, description="dense: texts per embedding batch.")

    # ---- http -----------------------------------------------------------------------
    url: str = Field(DEFAULT_URL, description="http: the server's /retrieve endpoint.")
    timeout_s: float = Field(10.0, gt=0, description="http: per-request timeout.")
    max_retries: int = Field(3, ge=0, description="http: retries after the first attempt.")
    retry_backoff_s: float = Field(
        0.2, ge=0, description="http: first retry delay; doubles each retry."
    )
    max_concurrency: int = Field(8, ge=1, description="http: requests in flight at once.")

    # ---- micro-batching (http client, in-process bm25, and the server) ---------------
    batch_size: int = Field(64, ge=1, description="Most queries sent in one batch.")
    batch_wait_ms: float = Field(
        2.0, ge=0, description="How long a batch waits for more queries before it goes."
    )

    options: dict[str, Any] = Field(
        default_factory=dict, description="Backend-specific extras not covered above."
    )

    def cache_key(self) -> str:
        return self.model_dump_json()
