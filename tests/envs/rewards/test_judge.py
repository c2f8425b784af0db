"""The LLM judge against the suite's real vLLM server (a tiny model on 127.0.0.1).

The tiny model writes noise, so each test pins its answer's shape with vLLM's
structured outputs (a regex), which is what a production judge setup may do too:
the server still runs the model and the whole request path, and the judge parses
what came back. A counting proxy in front of the server shows the cache (a second
call makes no request) and the retries (a 503 first, then the real answer).
"""

from __future__ import annotations

import asyncio
import re

import pytest
from support.judge_proxy import JudgeProxy
from support.vllm_server import SERVED_NAME, vllm_server  # noqa: F401 (the fixture)

from agentenvs.envs.rewards.judge import Judge, JudgeInput
from agentenvs.envs.rewards.judge_cache import clear_memory_cache
from agentenvs.envs.rewards.judge_settings import JudgeSettings

pytestmark = pytest.mark.services  # starts a real service

ITEM = JudgeInput(question="What is 2 + 3?", response="The answer is \\boxed{5}.", reference="5")


def _settings(url: str, regex: str | None, **overrides: object) -> JudgeSettings:
    extra = {"structured_outputs": {"regex": regex}} if regex else {}
    values = {"base_url": url, "model": SERVED_NAME, "max_tokens": 12, "extra_body": extra}
    return JudgeSettings.model_validate({**values, **overrides})


@pytest.fixture
def proxy(vllm_server):  # noqa: F811
    clear_memory_cache()
    made = JudgeProxy(vllm_server.url)
    yield made
    made.close()


def _judge(settings: JudgeSettings, *items: JudgeInput) -> tuple[list, int]:
    async def run() -> tuple[list, int]:
        judge = Judge(settings)
        try:
            return [await judge.judge(item) for item in items], judge.requests
        finally:
            await judge.aclose()

    return asyncio.run(run())


def test_a_real_verdict_is_parsed_and_the_second_call_is_served_from_the_cache(proxy):
    settings = _settings(proxy.url, r"SCORE: [0-9]")
    (first, second), requests = _judge(settings, ITEM, ITEM)
    assert first.status == "ok" and re.fullmatch(r"SCORE: [0-9]", first.text), first
    assert first.score == float(first.text[-1])
    assert first.reward == pytest.approx(first.score / 10)
    assert first.model == SERVED_NAME and len(first.prompt_sha256) == 16
    assert (first.attempts, first.cached) == (1, False)
    assert (second.attempts, second.cached, second.text) == (0, True, first.text)
    assert proxy.requests == 1 == requests  # the second call never reached the server
    other = JudgeInput(ITEM.question, "The answer is \\boxed{6}.", ITEM.reference)
    _judge(settings, other)
    assert proxy.requests == 2  # another input is another key


def test_a_503_is_retried_and_the_real_answer_then_used(proxy):
    proxy.fail_next = 1
    settings = _settings(proxy.url, r"SCORE: [0-9]", cache="off", backoff=0.05)
    (verdict,), _ = _judge(settings, ITEM)
    assert verdict.status == "ok" and verdict.attempts == 2, verdict
    assert (proxy.requests, proxy.failed) == (2, 1)


def test_without_retries_the_503_is_a_recorded_http_error_not_a_zero_score(proxy):
    proxy.fail_next = 1
    settings = _settings(proxy.url, r"SCORE: [0-9]", cache="off", retries=0, failure_reward=-1.0)
    (verdict,), _ = _judge(settings, ITEM)
    assert verdict.status == "http_error" and "HTTP 503" in verdict.error, verdict
    assert verdict.transient  # busy: a judged env raises JudgeUnavailable, the group retries
    assert (verdict.score, verdict.reward, verdict.text) == (None, -1.0, "")
    assert verdict.logs()["judge/status"] == "http_error"


def test_an_unknown_model_fails_at_once_without_retrying(proxy):
    settings = JudgeSettings(base_url=proxy.url, model="no-such-model", backoff=0.05)
    (verdict,), requests = _judge(settings, ITEM)
    assert verdict.status == "http_error" and "HTTP 404" in verdict.error, verdict
    assert not verdict.transient  # asking again gets the same 404
    assert requests == 1 == proxy.requests


@pytest.mark.parametrize(
    ("regex", "status", "score"),
    [
        (r"I cannot grade this", "no_score", None),
        (r"SCORE: 4[0-9]", "out_of_range", "read"),
    ],
)
def test_real_verdicts_that_do_not_give_a_usable_score_are_failures(proxy, regex, status, score):
    (verdict,), _ = _judge(_settings(proxy.url, regex), ITEM)
    assert verdict.status == status and verdict.failed, verdict
    assert verdict.reward == 0.0  # the failure reward, and the status says why
    assert (verdict.score is None) == (score is None)
    assert verdict.logs()["judge/verdict"] == verdict.text != ""


@pytest.mark.parametrize("limit", [1, 3])
def test_the_concurrency_limit_caps_requests_in_flight(proxy, limit):
    settings = _settings(proxy.url, r"SCORE: [0-9]", cache="off", concurrency=limit)
    items = [JudgeInput(ITEM.question, f"answer {i}", "5") for i in range(4)]

    async def run() -> int:
        judge = Judge(settings)
        in_flight = peak = 0
        real = judge._request

        async def counted(messages):
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            try:
                return await real(messages)
            finally:
                in_flight -= 1

        judge._request = counted  # type: ignore[method-assign]
        verdicts = await asyncio.gather(*(judge.judge(item) for item in items))
        await judge.aclose()
        assert all(v.status == "ok" for v in verdicts), verdicts
        return peak

    assert asyncio.run(run()) == limit
