"""preset=search_r1: each knob against Search-R1's own behaviour, over hand-written actions.

Facts from PeterGriffinJin/Search-R1 (llm_agent/generation.py, train_grpo.sh); the
robustness tests at the end hold under every preset.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.preset_play import play_turns as play
from support.search_r1_helpers import free_port, start_server

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.registry import make
from agentenvs.envs.search_r1.config import SEARCH_R1_PRESET, SearchR1Config
from agentenvs.envs.search_r1.retrievers import RetrieverConfig, make_retriever
from agentenvs.envs.search_r1.retrievers.base import QueryRejected, RetrieverError

AGENTENVS = str(Path(sys.executable).parent / "agentenvs")


QUERY = " ".join(
    make("search_r1").tasks()[0].question.rsplit("Question:", 1)[-1].split()[:12]
).replace('"', "")
"""Words of the first shipped question: a query the shipped corpus answers."""


def golden(cfg: SearchR1Config) -> str:
    return cfg.tasks()[0].golden_answers[0]


def test_preset_sets_the_originals_values_and_the_caller_wins():
    cfg = make("search_r1", preset="search_r1")
    # scripts/nq_hotpotqa/v0.*/train_grpo.sh and evaluate.sh: max_turns=4, max_response_length=500
    assert cfg.max_turns == 4 and cfg.limits.max_turns == 5
    assert cfg.limits.max_tokens_per_turn == 500 and cfg.limits.max_response_tokens is None
    assert cfg.answer_scope == "prompt_and_response" and not cfg.last_turn_hint
    assert cfg.parse_point == "first_stop" and cfg.obs_truncation == "cut_end"
    assert cfg.limits.on_truncated_action == "pass" and cfg.retriever.topk == 3
    assert cfg.max_obs_tokens == 500 and cfg.reward == "em" and cfg.protocol == "tags"
    mine = make("search_r1", preset="search_r1", max_turns=3, retriever={"kind": "bm25"})
    assert mine.max_turns == 3 and mine.limits.max_turns == 4 and mine.retriever.topk == 3
    default = make("search_r1")  # today's defaults are unchanged
    assert default.parse_point == "whole_action" and default.limits.max_tokens_per_turn is None
    assert default.answer_scope == "actions" and default.last_turn_hint
    assert set(SEARCH_R1_PRESET) <= set(SearchR1Config.model_fields)


def test_an_unknown_preset_is_a_clear_error():
    from agentenvs.envs.registry import EnvConfigError

    with pytest.raises(EnvConfigError, match=r"unknown preset 'gigpo'.*presets: search_r1"):
        make("search_r1", preset="gigpo")


async def test_a_turn_cut_by_the_token_cap_is_invalid_and_the_episode_goes_on(tokenizer):
    cut = "<think>I am still thinking about"
    preset = await play(
        make("search_r1", preset="search_r1").make_env(0, tokenizer), [(cut, "length")]
    )
    assert not preset[-1].episode_done
    assert preset[-1].metrics["invalid_actions"] == 1
    default = await play(make("search_r1").make_env(0, tokenizer), [(cut, "length")])
    assert default[-1].episode_done and default[-1].metrics["stop/max_tokens"] == 1


async def test_text_after_the_first_stop_is_neither_acted_on_nor_scored(tokenizer):
    cfg = make("search_r1", preset="search_r1", max_turns=1)
    answer = golden(cfg)
    turns = [
        (f"<search> {answer} </search> <answer> {answer} </answer>", "eos"),
        ("I give up.", "eos"),
    ]
    preset = await play(cfg.make_env(0, tokenizer), turns)
    assert preset[0].metrics["searches"] == 1
    assert preset[-1].metrics["stop/max_turns"] == 1 and preset[-1].reward == 0.0
    whole = await play(make("search_r1", max_turns=1).make_env(0, tokenizer), turns)
    assert whole[-1].reward == 1.0  # the answer written after </search> was scored


async def test_search_wins_the_cut_even_after_an_earlier_answer(tokenizer):
    cfg = make("search_r1", preset="search_r1")
    answer = golden(cfg)
    (result,) = await play(cfg.make_env(0, tokenizer), [(f"<answer> {answer} </answer>", "eos")])
    assert result.episode_done and result.reward == 1.0


async def test_observation_truncation_cuts_off_the_end_like_the_original(tokenizer):
    cfg = make("search_r1", preset="search_r1", max_obs_tokens=40)
    env = cfg.make_env(0, tokenizer)
    (result,) = await play(env, [(f"<search> {QUERY} </search>", "stop")])
    block = tokenizer.decode(result.next_observation).rsplit("<information>", 1)[-1]
    assert "Doc 1(Title:" in block and "</information>" not in block
    assert result.metrics["obs_truncated"] == 1
    kept = make("search_r1", max_obs_tokens=40).make_env(0, tokenizer)
    (result,) = await play(kept, [(f"<search> {QUERY} </search>", "stop")])
    assert tokenizer.decode(result.next_observation).rstrip().endswith("</information>")


# ---- robustness: ours under every preset --------------------------------------------

REFUSING_SERVER = """
import sys, uvicorn
from fastapi.responses import JSONResponse
from agentenvs.envs.search_r1.retrievers import make_retriever, RetrieverConfig
from agentenvs.envs.search_r1.server import create_app
port, refuse_all = int(sys.argv[1]), sys.argv[2] == "all"
config = RetrieverConfig()
app = create_app(make_retriever(config), config)

@app.middleware("http")
async def refuse(request, call_next):
    # Search-R1's server answers 500 to a query with too many distinct terms.
    if request.url.path == "/retrieve":
        body = await request.json()
        if refuse_all or any("zzrefuse" in q for q in body["queries"]):
            return JSONResponse({"detail": "too many clauses"}, status_code=500)
    return await call_next(request)

uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
"""


@pytest.fixture(scope="module")
def refusing_servers(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("servers")
    servers = {}
    for mode in ("one", "all"):
        port = free_port()
        servers[mode] = start_server(
            ["-c", REFUSING_SERVER, str(port), mode], port, log_dir / f"{mode}.log"
        )
    yield servers
    for server in servers.values():
        server.stop()


def http_config(url: str, **extra) -> SearchR1Config:
    retriever = {"kind": "http", "url": url, "max_retries": 1, "retry_backoff_s": 0.01}
    return make("search_r1", preset="search_r1", retriever=retriever, **extra)


async def test_a_refused_query_costs_only_its_own_episode(tokenizer, refusing_servers):
    cfg = http_config(refusing_servers["one"].url)
    bad, good = cfg.make_env(0, tokenizer), cfg.make_env(0, tokenizer)
    results = await asyncio.gather(
        play(bad, [("<search> zzrefuse " + "term " * 50 + "</search>", "stop")]),
        play(good, [(f"<search> {QUERY} </search>", "stop")]),
    )
    (refused,), (served,) = results
    assert not refused.episode_done and refused.metrics["query_errors"] == 1
    assert "could not run that query" in tokenizer.decode(refused.next_observation)
    assert "Doc 1(Title:" in tokenizer.decode(served.next_observation)
    ended = http_config(refusing_servers["one"].url, on_query_error="end")
    (result,) = await play(ended.make_env(0, tokenizer), [("<search> zzrefuse </search>", "stop")])
    assert result.episode_done and result.metrics["stop/query_error"] == 1 and result.reward == 0


async def test_a_server_refusing_everything_is_still_a_retrieval_failure(
    tokenizer, refusing_servers
):
    cfg = http_config(refusing_servers["all"].url)
    with pytest.raises(RetrieverError, match="unavailable"):
        await play(cfg.make_env(0, tokenizer), [(f"<search> {QUERY} </search>", "stop")])


async def test_http_errors_carry_the_status_the_server_answered(refusing_servers):
    def retriever_of(mode: str):
        config = RetrieverConfig(
            kind="http", url=refusing_servers[mode].url, max_retries=1, retry_backoff_s=0.01
        )
        return make_retriever(config, cached=False)

    one, everything = retriever_of("one"), retriever_of("all")
    try:
        with pytest.raises(QueryRejected) as refused:
            await one.search(["zzrefuse term"], 3)
        assert refused.value.status == 500 and isinstance(refused.value, AgentEnvsError)
        with pytest.raises(RetrieverError, match="unavailable") as failed:
            await everything.search([QUERY], 3)
        assert failed.value.status == 500
    finally:
        await one.close()
        await everything.close()
    dead = make_retriever(
        RetrieverConfig(kind="http", url=f"http://127.0.0.1:{free_port()}/retrieve",
                        max_retries=0, retry_backoff_s=0),
        cached=False,
    )  # fmt: skip
    try:
        with pytest.raises(RetrieverError) as unreachable:
            await dead.search(["x"], 3)
        assert unreachable.value.status is None  # no answer, so no status
    finally:
        await dead.close()


async def test_a_lone_surrogate_in_a_query_is_searched_not_raised(tokenizer, refusing_servers):
    cfg = http_config(refusing_servers["one"].url, protocol="tool_call")
    # json.dumps writes a lone surrogate as the escape a model would emit: \\ud83d
    call = json.dumps({"name": "search", "arguments": {"query_list": ["\ud83d " + QUERY]}})
    assert "\\ud83d" in call
    (result,) = await play(cfg.make_env(0, tokenizer), [(f"<tool_call>{call}</tool_call>", "eos")])
    assert not result.episode_done and "Doc 1 (Title:" in tokenizer.decode(result.next_observation)


async def test_queries_past_the_per_turn_limit_are_said_to_be_dropped(tokenizer):
    cfg = make("search_r1", preset="search_r1", protocol="tool_call")
    queries = json.dumps(["film", "director", "river", "city"])
    call = f'{{"name": "search", "arguments": {{"query_list": {queries}}}}}'
    (result,) = await play(cfg.make_env(0, tokenizer), [(f"<tool_call>{call}</tool_call>", "eos")])
    assert "1 more query not searched: at most 3 per turn" in tokenizer.decode(
        result.next_observation
    )


def test_rollout_cli_runs_the_preset_with_the_oracle(tmp_path):
    out = tmp_path / "sr1.jsonl"
    command = [AGENTENVS, "rollout", "search_r1", "--set", "preset=search_r1", "--groups", "3",
               "--group-size", "2", "--out", str(out), "--json-summary", "--no-progress"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["failed"] == 0 and summary["mean_reward"] == 1.0
    assert summary["stop_reasons"] == {"completed": 6}
