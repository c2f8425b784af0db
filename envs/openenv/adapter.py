"""Any OpenEnv environment as one of ours: its server's session under our collector.

An episode opens OpenEnv's own client (``GenericEnvClient``, a WebSocket session on
the server), resets it with the task's seed and plays it as a :class:`TextEnv`: the
model's decoded action goes into the action's text field, the observation comes
back as text, and our renderer (chat or continuation) turns that text into
observation tokens appended after the sampled ones. So masks, limits, provenance and
``agentenvs check`` are ours; what crosses the wire is text (see docs/env-servers.md,
"OpenEnv": the tokens of an observation are what our renderer makes of its text).

Failures: a server that cannot be reached is a :class:`OpenEnvUnavailable` (a
``TransientError``: the collector retries the group with fresh envs); an error the
server answers with (an action its schema refuses, a crash in its step) is a
:class:`OpenEnvServerError` and fails the group with that message recorded.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from agentenvs.envs.errors import AgentEnvsError, TransientError
from agentenvs.envs.rendered_env import RenderedEnv
from agentenvs.envs.text import Message, TextEnv, TextStep
from agentenvs.envs.types import SamplerStopReason, StopReason

if TYPE_CHECKING:
    from agentenvs.envs.openenv.config import OpenEnvConfig


class OpenEnvUnavailable(TransientError, ConnectionError):
    """The OpenEnv server did not accept a session (down, restarting, at capacity)."""


class OpenEnvServerError(AgentEnvsError, RuntimeError):
    """The OpenEnv server answered with an error; the message is the server's."""


class OpenEnvSchemaError(AgentEnvsError, ValueError):
    """The server's action schema does not say which field takes the model's text."""


class _SessionRefused(Exception):
    """The server closed a session it had just accepted (what it does at capacity)."""


def http_url(url: str) -> str:
    """The HTTP base of an OpenEnv URL (its /schema, /health live there)."""
    if url.startswith("ws://"):
        return "http://" + url[5:]
    if url.startswith("wss://"):
        return "https://" + url[6:]
    return url


async def discover_action_field(url: str, timeout: float = 10.0) -> str:
    """The one required string field of the server's action schema (``GET /schema``)."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            response = await client.get(f"{http_url(url)}/schema")
            response.raise_for_status()
    except httpx.HTTPError as err:
        raise OpenEnvUnavailable(f"OpenEnv server {url}: GET /schema failed: {err}") from err
    schema = response.json().get("action", {})
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    text_fields = [
        name
        for name, spec in properties.items()
        if name in required and spec.get("type") == "string"
    ]
    if len(text_fields) != 1:
        raise OpenEnvSchemaError(
            f"OpenEnv server {url}: its action schema has required string fields "
            f"{text_fields or 'none'} (fields: {sorted(properties)}); set action_field"
        )
    return text_fields[0]


def observation_text(observation: dict[str, Any], field: str | None) -> str:
    """What the model is shown of an observation: one field, or all of it as JSON."""
    if field is None:
        return json.dumps(observation, sort_keys=True, ensure_ascii=False)
    if field not in observation:
        raise OpenEnvServerError(
            f"observation has no field {field!r}; its fields: {sorted(observation)}"
        )
    value = observation[field]
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class OpenEnvTextEnv(TextEnv):
    """One episode of an OpenEnv environment over text. :meth:`start` must run first
    (the prompt is the server's reset answer); every driver runs it (``TextEnv.start``)."""

    def __init__(self, config: OpenEnvConfig, seed: int) -> None:
        self.config = config
        self.seed = seed
        self.client: Any = None
        self.first_text: str | None = None
        self.action_field = config.action_field
        self.turns = 0
        self.last_reward: float | None = None
        self.stops: list[str] = []

    async def start(self) -> None:
        from openenv.core.generic_client import GenericEnvClient

        if self.action_field is None:
            self.action_field = await discover_action_field(
                self.config.url, self.config.connect_timeout
            )
        deadline = time.monotonic() + self.config.capacity_wait
        pause = 0.05
        while True:
            try:
                result = await self._open_session(GenericEnvClient)
                break
            except (OpenEnvServerError, _SessionRefused) as err:
                # A server at capacity is busy, not broken: wait for a session to free up,
                # and past the wait report it as a failure of the moment (retried). It says
                # so and closes the socket, so a reset may meet the closed socket instead.
                if isinstance(err, OpenEnvServerError) and "CAPACITY_REACHED" not in str(err):
                    raise
                if time.monotonic() >= deadline:
                    raise OpenEnvUnavailable(
                        f"{err} (waited {self.config.capacity_wait}s)"
                    ) from err
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)
        self.first_text = observation_text(result.observation, self.config.observation_field)
        self._read_stops(result.observation)

    def _read_stops(self, observation: dict[str, Any]) -> None:
        field = self.config.stop_field
        if field and isinstance(observation.get(field), list):
            self.stops = [str(s) for s in observation[field]]

    def stop_sequences(self) -> list[str]:
        return list(self.stops)

    async def _open_session(self, client_class: Any) -> Any:
        """Connect a fresh client and reset it with the task's seed."""
        await self.close()
        self.client = client_class(
            base_url=self.config.url,
            connect_timeout_s=self.config.connect_timeout,
            message_timeout_s=self.config.message_timeout,
        )
        try:
            await self.client.connect()
        except ConnectionError as err:
            self.client = None
            raise OpenEnvUnavailable(f"OpenEnv server {self.config.url}: {err}") from err
        try:
            return await self._call(self.client.reset(seed=self.seed, **self.config.reset_kwargs))
        except OpenEnvUnavailable as err:
            raise _SessionRefused(str(err)) from err

    async def _call(self, pending: Any) -> Any:
        """Await a client call, sorting its failures into unreachable and refused."""
        try:
            return await pending
        except (ConnectionError, OSError, TimeoutError) as err:
            raise OpenEnvUnavailable(f"OpenEnv server {self.config.url}: {err!r}") from err
        except RuntimeError as err:  # the client's form of an error the server sent
            raise OpenEnvServerError(f"OpenEnv server {self.config.url}: {err}") from err
        except Exception as err:  # a dropped connection surfaces as websockets' own errors
            if type(err).__module__.startswith("websockets"):
                raise OpenEnvUnavailable(f"OpenEnv server {self.config.url}: {err!r}") from err
            raise

    def initial_messages(self) -> list[Message]:
        if self.first_text is None:
            raise RuntimeError("OpenEnvTextEnv.start() must run before the prompt is read")
        messages: list[Message] = []
        if self.config.instructions:
            messages.append({"role": "system", "content": self.config.instructions})
        messages.append({"role": "user", "content": self.first_text})
        return messages

    async def step(self, action_text: str, *, stop_reason: SamplerStopReason) -> TextStep:
        action = {**self.config.action_extra, str(self.action_field): action_text}
        if self.config.stop_reason_field:
            action[self.config.stop_reason_field] = stop_reason
        result = await self._call(self.client.step(action))
        self._read_stops(result.observation)
        self.turns += 1
        reward = float(result.reward) if result.reward is not None else 0.0
        self.last_reward = reward
        text = observation_text(result.observation, self.config.observation_field)
        logs = {"openenv_reward_missing": int(result.reward is None)}
        if result.done:
            return TextStep(
                observation=None,
                reward=reward,
                done=True,
                stop_reason=StopReason.COMPLETED,
                logs={**logs, "openenv_final_observation": text},
            )
        next_stop = list(self.stops) if self.config.stop_field else None
        observation: str | Message = text
        if self.config.renderer_kind == "chat":
            observation = {"role": "user", "content": text}
        return TextStep(observation=observation, reward=reward, next_stop=next_stop, logs=logs)

    def scripted_action(self, variant: str = "oracle") -> str | None:
        """The config's ``script``, one action per turn (there is no oracle of ours)."""
        if variant != "oracle" or self.turns >= len(self.config.script):
            return None
        return self.config.script[self.turns]

    async def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            await client.disconnect()


class OpenEnvRenderedEnv(RenderedEnv):
    """An OpenEnv episode at the token level, named for its server in messages."""

    task: OpenEnvTextEnv

    def label(self) -> str:
        return f"OpenEnv({self.task.config.url})"
