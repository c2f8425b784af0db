"""An LLM-judge reward component: any OpenAI-compatible chat endpoint scores an answer.

One :class:`Judge` per settings per event loop is shared by every episode of a process
(:func:`shared_judge`), so its concurrency limit holds across a whole collection, not
per episode. A request is retried with doubling backoff on what a busy or restarting
server gives (connection errors, timeouts, 408, 409, 429, 5xx); any other HTTP status
fails the verdict at once, since asking again gets the same answer. Whatever happens,
:meth:`Judge.judge` returns a :class:`~.verdict.Verdict` and never raises; the verdict's
status says what went wrong. An episode is never *scored* by a judge that gave no
answer, though: :class:`~.judged_env.JudgedTextEnv` turns an ``http_error`` verdict into
:class:`JudgeUnavailable` (transient: the collector retries the group, then records it
failed) or :class:`JudgeRefused` (a setting the judge refuses: recorded failed at once),
since a failure reward for a dead judge would be trained on as if the answer were wrong.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from dataclasses import dataclass
from typing import Any

import httpx

from agentenvs.envs.errors import AgentEnvsError, TransientError
from agentenvs.envs.rewards.identity import RewardIdentity, identify
from agentenvs.envs.rewards.judge_cache import VerdictCache, cache_key
from agentenvs.envs.rewards.judge_settings import JudgePrompt, JudgeSettings
from agentenvs.envs.rewards.verdict import Verdict, parse_score

JUDGE_VERSION = "1"
"""Bump when the way a verdict becomes a reward changes."""

RETRIED_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})


class JudgeRefused(AgentEnvsError):
    """The judge answered in a way asking again will not change (unknown model, a body
    it refuses, an answer that is not chat-completion JSON): the group fails, unscored."""


class JudgeUnavailable(JudgeRefused, TransientError):
    """The judge could not be reached or stayed busy after every retry: the group's
    attempt fails as transient (retried by the collector, recorded failed if it stays down)."""


def raise_for_verdict(verdict: Verdict, url: str) -> None:
    """:class:`JudgeUnavailable`/:class:`JudgeRefused` for a verdict the judge never gave."""
    if verdict.status != "http_error":
        return
    error = JudgeUnavailable if verdict.transient else JudgeRefused
    raise error(
        f"the judge at {url} (model {verdict.model!r}) gave no verdict after "
        f"{verdict.attempts} request(s): {verdict.error}"
    )


_Answer = tuple[str | None, str, int, bool]
"""A request's outcome: answer text (None: none), last error, attempts, transient."""


@dataclass(frozen=True)
class JudgeInput:
    """What the judge reads of one episode."""

    question: str
    response: str
    reference: str = ""


@functools.lru_cache(maxsize=32)
def _weights_label(directory: str, model: str) -> tuple[str, dict[str, Any]]:
    """The weights identity of a judge serving weights of ours (hashing is slow: once)."""
    from agentenvs.envs.weights_identity import WeightsIdentity, hash_weights

    identity = WeightsIdentity(
        path="base", name=model, source=directory, sha256=hash_weights(directory)
    )
    return identity.label(), identity.to_json()


class Judge:
    """Scores :class:`JudgeInput` s with one judge model and one prompt."""

    def __init__(self, settings: JudgeSettings, *, client: httpx.AsyncClient | None = None) -> None:
        self.settings = settings
        self.prompt = JudgePrompt.load(settings.prompt_file)
        self.cache = VerdictCache(settings.cache, settings.cache_dir)
        self.weights, self.weights_identity = (
            _weights_label(settings.weights_dir, settings.model)
            if settings.weights_dir
            else ("", {})
        )
        self._client = client
        self._semaphore = asyncio.Semaphore(settings.concurrency)
        self._pending: dict[str, asyncio.Future[tuple[str | None, str, int]]] = {}
        self.requests = 0
        """HTTP requests this judge made (cache hits make none)."""

    # ---- identity -------------------------------------------------------------------
    def identity(self) -> RewardIdentity:
        """The judge as a reward component: its code, model, prompt and weights."""
        s = self.settings
        settings = {
            "model": s.model,
            "prompt_sha256": self.prompt.sha256,
            "prompt_file": s.prompt_file or "(shipped) judge_reference.txt",
            "score_range": [s.min_score, s.max_score],
            "weight": s.weight,
            "combine": s.combine,
            "failure_reward": s.failure_reward,
            "temperature": s.temperature,
            "max_tokens": s.max_tokens,
        }
        if self.weights_identity:
            settings["weights"] = self.weights_identity
        return identify(
            Judge.judge, "judge", JUDGE_VERSION, depends=(parse_score, Judge.reward_of),
            settings=settings,
        )  # fmt: skip

    # ---- one verdict ----------------------------------------------------------------
    def messages(self, item: JudgeInput) -> list[dict[str, str]]:
        values = {
            "question": item.question,
            "response": item.response,
            "reference": item.reference,
            "rubric": self.settings.rubric,
        }
        return [{"role": "user", "content": self.prompt.render(values)}]

    def key(self, messages: list[dict[str, str]]) -> str:
        s = self.settings
        return cache_key(
            {
                "model": s.model,
                "weights": self.weights,
                "prompt_sha256": self.prompt.sha256,
                "sampling": [s.temperature, s.max_tokens, s.extra_body],
                "messages": messages,
            }
        )

    def reward_of(self, score: float | None) -> float:
        s = self.settings
        if score is None:
            return s.failure_reward
        return s.weight * (score - s.min_score) / (s.max_score - s.min_score)

    async def judge(self, item: JudgeInput) -> Verdict:
        """The verdict on one episode (from the cache when this input was judged).

        Identical inputs judged at the same time share one request: a group's
        episodes finish together, and the copies of one answer must not all miss."""
        messages = self.messages(item)
        key = self.key(messages)
        cached = self.cache.get(key)
        if cached is not None:
            return self._verdict(cached, attempts=0, cached=True)
        pending = self._pending.get(key)
        shared = pending is not None
        if pending is None:
            pending = asyncio.ensure_future(self._limited(messages))
            self._pending[key] = pending
            pending.add_done_callback(lambda _: self._pending.pop(key, None))
        # shield: a cancelled episode does not cancel the request others wait for
        text, error, attempts, transient = await asyncio.shield(pending)
        if text is None:
            return self._failed(error, 0 if shared else attempts, transient)
        if not shared:
            self.cache.put(key, text)
        return self._verdict(text, attempts=0 if shared else attempts, cached=shared)

    async def _limited(self, messages: list[dict[str, str]]) -> _Answer:
        async with self._semaphore:
            return await self._request(messages)

    def _verdict(self, text: str, *, attempts: int, cached: bool) -> Verdict:
        s = self.settings
        parsed = parse_score(text, s.min_score, s.max_score)
        reward = self.reward_of(parsed.score if parsed.status == "ok" else None)
        return Verdict(
            parsed.status, parsed.score, reward, text, s.model, self.prompt.sha256,
            self.weights, attempts=attempts, cached=cached,
        )  # fmt: skip

    def _failed(self, error: str, attempts: int, transient: bool) -> Verdict:
        s = self.settings
        return Verdict(
            "http_error", None, s.failure_reward, "", s.model, self.prompt.sha256,
            self.weights, error=error, attempts=attempts, transient=transient,
        )  # fmt: skip

    # ---- the endpoint ---------------------------------------------------------------
    async def _request(self, messages: list[dict[str, str]]) -> _Answer:
        """The answer's text, or None with the last error; the attempts made; and
        whether the error is of the moment (unreachable, busy) rather than final."""
        s = self.settings
        body = {
            "model": s.model,
            "messages": messages,
            "temperature": s.temperature,
            "max_tokens": s.max_tokens,
            **s.extra_body,
        }
        headers = {"Authorization": f"Bearer {s.api_key()}"} if s.api_key() else {}
        url = s.base_url.rstrip("/") + "/v1/chat/completions"
        error = ""
        for attempt in range(s.retries + 1):
            if attempt:
                await asyncio.sleep(s.backoff * 2 ** (attempt - 1))
            self.requests += 1
            try:
                response = await self._http().post(url, json=body, headers=headers)
            except httpx.HTTPError as err:  # connection refused, reset, timeout
                error = f"{type(err).__name__}: {err}"
                continue
            if response.status_code == 200:
                try:
                    return _answer_text(response.json()), "", attempt + 1, False
                except (ValueError, KeyError, IndexError, TypeError) as err:
                    return None, f"unreadable answer: {err}", attempt + 1, False
            error = f"HTTP {response.status_code}: {response.text[:200]}"
            if response.status_code not in RETRIED_STATUSES:
                return None, error, attempt + 1, False
        return None, error, s.retries + 1, True

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            limits = httpx.Limits(max_connections=self.settings.concurrency)
            self._client = httpx.AsyncClient(timeout=self.settings.timeout, limits=limits)
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


def _answer_text(payload: dict[str, Any]) -> str:
    content = payload["choices"][0]["message"].get("content")
    return content if isinstance(content, str) else ""


_judges: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Judge]] = (
    weakref.WeakKeyDictionary()
)


def shared_judge(settings: JudgeSettings) -> Judge:
    """The process's judge for these settings on the running loop (made on first use).

    Per loop, because an HTTP client's connections and a semaphore belong to the loop
    they were first used on; per settings, so two judges never share a limit."""
    loop = asyncio.get_running_loop()
    judges = _judges.setdefault(loop, {})
    key = settings.model_dump_json()
    if key not in judges:
        judges[key] = Judge(settings)
    return judges[key]


def judge_identity(settings: JudgeSettings) -> RewardIdentity:
    """The judge's reward identity without a running loop (for the records)."""
    return _identity(settings.model_dump_json())


@functools.lru_cache(maxsize=32)
def _identity(settings_json: str) -> RewardIdentity:
    return Judge(JudgeSettings.model_validate_json(settings_json)).identity()
