"""The http retriever against this project's retrieval server on 127.0.0.1.

The server runs in a subprocess (uvicorn), as it would in production; tests kill it
mid-run and slow it down to check the client's errors, timeouts and retries.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from support.search_r1_helpers import (
    drive,
    free_port,
    masked_spans,
    start_cli_server,
    start_slow_server,
)

from agentenvs.envs.errors import is_transient
from agentenvs.envs.search_r1.config import SearchR1Config
from agentenvs.envs.search_r1.retrievers import RetrieverConfig, RetrieverError, make_retriever
from agentenvs.envs.search_r1.retrievers.base import RetrieverUnavailable
from agentenvs.envs.search_r1.retrievers.http import HttpRetriever, parse_response

pytestmark = pytest.mark.timeout(120)  # a hang is a failure, not a stuck CI run


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    srv = start_cli_server(port, tmp_path_factory.mktemp("srv") / "server.log")
    yield srv
    srv.stop()


def http_config(url: str, **kw) -> RetrieverConfig:
    return RetrieverConfig(kind="http", url=url, **kw)


async def test_server_speaks_the_search_r1_wire_format(server):
    async with httpx.AsyncClient() as client:
        payload = {
            "queries": ["Saltwind ship", "Peverell island"],
            "topk": 2,
            "return_scores": True,
        }
        data = (await client.post(server.url, json=payload)).json()
        assert len(data["result"]) == 2 and all(len(hits) == 2 for hits in data["result"])
        hit = data["result"][0][0]
        assert set(hit) == {"document", "score"} and set(hit["document"]) == {"id", "contents"}
        assert hit["document"]["contents"].startswith('"Saltwind (ship)"\n')
        plain = (await client.post(server.url, json={**payload, "return_scores": False})).json()
        assert plain["result"][0][0] == hit["document"]  # documents themselves, no scores
        bad = await client.post(server.url, json={"queries": "not a list"})
        assert bad.status_code == 422


async def test_http_results_equal_the_local_bm25(server):
    queries = ["Saltwind ship built by", "River Sella empties into", "Mount Corran first ascent"]
    remote = make_retriever(http_config(server.url), cached=False)
    try:
        over_http = await remote.search(queries, 3)
    finally:
        await remote.close()
    local = await make_retriever(RetrieverConfig()).search(queries, 3)
    assert [[p.id for p in hits] for hits in over_http] == [[p.id for p in hits] for hits in local]
    assert over_http[0][0].contents == local[0][0].contents
    assert over_http[0][0].score == pytest.approx(local[0][0].score, rel=1e-5)


async def test_oracle_end_to_end_over_http(server, tokenizer):
    cfg = SearchR1Config(retriever={"kind": "http", "url": server.url})
    for index in range(12):
        task = cfg.tasks()[index]
        ep = await drive(cfg.make_env(index, tokenizer))
        assert ep.reward == 1.0, task.question
        assert len(masked_spans(ep)) == len(task.hops)


async def test_concurrent_searches_share_requests(server):
    retriever = HttpRetriever(http_config(server.url, batch_wait_ms=20, batch_size=64))
    requests = 0

    async def count(_request):
        nonlocal requests
        requests += 1

    state = retriever._state.get()
    state.client.event_hooks["request"].append(count)
    try:
        queries = [f"founded by {name}" for name in ["Peverell", "Hesketh", "Greywater"]] * 10
        results = await asyncio.gather(*(retriever.search([q], 3) for q in queries))
    finally:
        await retriever.close()
    assert len(results) == 30 and all(len(r[0]) == 3 for r in results)
    assert requests < 30  # 30 searches from 30 "envs" went out in a few batched requests


async def test_dead_server_gives_a_clear_error(tmp_path, tokenizer):
    port = free_port()
    srv = start_cli_server(port, tmp_path / "server.log")
    cfg = http_config(srv.url, timeout_s=2, max_retries=2, retry_backoff_s=0.05)
    retriever = make_retriever(cfg, cached=False)
    live = SearchR1Config(retriever=cfg.model_dump()).make_env(0, tokenizer)
    try:
        assert len((await retriever.search(["Peverell"], 3))[0]) == 3
        await live.initial_observation()
        tokens, stop = live.scripted_action("oracle")  # type: ignore[misc]
        first = await live.step(tokens, extra={"stop_reason": stop})  # a search, answered
        assert not first.episode_done and first.metrics["searches"] == 1
        srv.stop()  # killed mid-run, and mid-episode
        with pytest.raises(
            RetrieverError, match=rf"127\.0\.0\.1:{port}/retrieve is unavailable after 3"
        ):
            await retriever.search(["Peverell"], 3)
        # The episode's next search fails the rollout as transient (issue 46): the
        # collector retries the group rather than scoring a search that never ran.
        tokens, stop = live.scripted_action("oracle")  # type: ignore[misc]
        with pytest.raises(RetrieverUnavailable) as raised:
            await live.step(tokens, extra={"stop_reason": stop})
        assert is_transient(raised.value)
    finally:
        srv.stop()
        await retriever.close()
        await live.close()

    # In an env: by default the rollout fails (the collector retries or reports the group) ...
    env_cfg = SearchR1Config(retriever=cfg.model_dump())
    with pytest.raises(RetrieverError):
        await drive(env_cfg.make_env(0, tokenizer))
    # ... or, if asked, the episode ends with a recorded stop reason.
    ended = SearchR1Config(retriever=cfg.model_dump(), on_retrieval_error="end")
    ep = await drive(ended.make_env(0, tokenizer))
    assert ep.reward == 0.0 and ep.final.metrics["stop/retrieval_error"] == 1
    assert "unavailable" in ep.final.logs["error"]


async def test_slow_server_times_out_then_retry_succeeds(tmp_path):
    port = free_port()
    srv = start_slow_server(port, tmp_path / "slow.log", delay=3.0, slow_requests=1)
    retriever = make_retriever(
        http_config(srv.url, timeout_s=0.5, max_retries=3, retry_backoff_s=0.05), cached=False
    )
    try:
        hits = (await retriever.search(["Saltwind ship"], 3))[0]
        assert hits[0].contents.startswith('"Saltwind (ship)"')
    finally:
        await retriever.close()
        srv.stop()


async def test_server_that_stays_slow_fails_with_a_timeout_message(tmp_path):
    port = free_port()
    srv = start_slow_server(port, tmp_path / "slow.log", delay=30.0, slow_requests=1000)
    retriever = make_retriever(
        http_config(srv.url, timeout_s=0.3, max_retries=1, retry_backoff_s=0.01), cached=False
    )
    try:
        with pytest.raises(RetrieverError, match=r"no answer within 0\.3s"):
            await retriever.search(["Saltwind ship"], 3)
    finally:
        await retriever.close()
        srv.stop()


async def test_nothing_listening_fails_fast():
    retriever = make_retriever(
        http_config(f"http://127.0.0.1:{free_port()}/retrieve", max_retries=1, retry_backoff_s=0),
        cached=False,
    )
    try:
        with pytest.raises(RetrieverError, match="ConnectError"):
            await retriever.search(["x"], 3)
    finally:
        await retriever.close()


def test_response_parsing_accepts_both_shapes_and_rejects_garbage():
    scored = {"result": [[{"document": {"id": 1, "contents": '"T"\nx'}, "score": 1.5}]]}
    assert parse_response(scored, 1)[0][0].score == 1.5
    plain = {"result": [[{"id": "2", "contents": '"T"\ny'}]]}
    passage = parse_response(plain, 1)[0][0]
    assert (passage.id, passage.score) == ("2", None)
    no_score = {"result": [[{"document": {"id": "3", "contents": "c"}}]]}
    assert parse_response(no_score, 1)[0][0].score is None
    flashrag = {"result": [[{"document": {"id": "4", "title": "T", "text": "z"}}]]}
    assert parse_response(flashrag, 1)[0][0].contents == '"T"\nz'
    for bad, n in [({}, 1), ({"result": []}, 1), ({"result": [[1]]}, 1), ({"result": [{}]}, 1)]:
        with pytest.raises(ValueError):
            parse_response(bad, n)


async def test_server_killed_while_answering(tmp_path):
    port = free_port()
    srv = start_slow_server(port, tmp_path / "slow.log", delay=20.0, slow_requests=1000)
    retriever = make_retriever(
        http_config(srv.url, timeout_s=10, max_retries=1, retry_backoff_s=0.01), cached=False
    )
    try:
        pending = asyncio.ensure_future(retriever.search(["Saltwind ship"], 3))
        await asyncio.sleep(0.5)  # the request is in flight, the server is "thinking"
        assert not pending.done()
        srv.stop()
        with pytest.raises(RetrieverError, match="unavailable after 2 attempt"):
            await pending
    finally:
        await retriever.close()
        srv.stop()
