"""An episode played on an env server, behind the in-process :class:`Env` interface.

The collector, trees and policies cannot tell it from a local env: observations are
the server's token ids (rebuilt from its delta answers), the step's reward, metrics
and logs are the server's values, and the declared extras (token caps, fork, label,
the scripted policy) are asked of the server's env. The per-turn token cap is a
synchronous question, so the value the server sent with its last answer is kept.
"""

from __future__ import annotations

import logging
from typing import Any

from agentenvs.envs.remote.client import RemoteEnvError, RemoteTransientError, ServerConnection
from agentenvs.envs.types import (
    Action,
    ActionExtra,
    Env,
    Observation,
    StepResult,
    StopCondition,
)

logger = logging.getLogger(__name__)


class RemoteEnv(Env):
    """One env session of a group session (see the module docstring)."""

    def __init__(self, connection: ServerConnection, entry: dict[str, Any]) -> None:
        self.connection = connection
        self.env_id: str = entry["env_id"]
        self._label: str = entry.get("label") or "RemoteEnv"
        self._max_response: int | None = entry.get("max_response_tokens")
        self._max_action: int | None = entry.get("max_action_tokens")
        self._ob: list[int] = []
        self.turns: int = int(entry.get("turns", 0))
        self.closed = False

    def _path(self, verb: str) -> str:
        return f"/v1/envs/{self.env_id}/{verb}"

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        data = await self.connection.env_call("initial_observation", self.env_id)
        self._ob = list(data["observation"])
        self._max_action = data.get("max_action_tokens")
        return list(self._ob), list(data["stop_condition"])

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        body = {
            "action": list(action),
            "stop_reason": (extra or {}).get("stop_reason", "stop"),
            "turn": self.turns,
        }
        data = await self.connection.env_call("step", self.env_id, body)
        observation = self._ob + body["action"]  # the context, made into the observation
        keep = int(data["keep"])
        if keep > len(observation):
            raise RemoteEnvError(f"env server {self.connection.url} kept {keep} tokens of a "
                                 f"{len(observation)}-token context")  # fmt: skip
        del observation[keep:]
        observation.extend(data["new"])
        self._ob = observation
        self.turns += 1
        self._max_action = data.get("max_action_tokens")
        return StepResult(
            reward=data["reward"],
            episode_done=bool(data["episode_done"]),
            next_observation=list(observation),
            next_stop_condition=list(data["next_stop_condition"]),
            metrics=dict(data.get("metrics") or {}),
            logs=dict(data.get("logs") or {}),
        )

    def max_action_tokens(self) -> int | None:
        return self._max_action

    def max_response_tokens(self) -> int | None:
        return self._max_response

    async def fork(self) -> RemoteEnv:
        data = await self.connection.call("POST", self._path("fork"), what="fork")
        clone = RemoteEnv(self.connection, data)
        clone._ob = list(self._ob)
        return clone

    async def scripted_action(self, variant: str = "oracle") -> tuple[list[int], str] | None:
        data = await self.connection.call(
            "POST", self._path("scripted_action"), {"variant": variant}, what="scripted_action"
        )
        answer = data.get("answer")
        return None if answer is None else (list(answer["tokens"]), answer["stop_reason"])

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            await self.connection.call("POST", self._path("close"), what="close")
        except (RemoteTransientError, RemoteEnvError) as err:  # gone with its server: nothing held
            logger.debug("closing remote env %s: %s", self.env_id, err)

    def label(self) -> str:
        return self._label
