"""One episode of a registered text environment, driven over a text-level wire.

Protocols that carry text rather than token ids (ORS, :mod:`agentenvs.envs.ors.server`;
OpenEnv, :mod:`agentenvs.envs.openenv.server`) need the same few rules around a
:class:`TextEnv`, kept here once so the two wires cannot drift apart: make the task,
await its :meth:`~TextEnv.start` (and close it when that fails, as every driver does),
apply the limits that can be judged on text (``limits.max_turns``, and a cut-off action
ending the episode unjudged when ``on_truncated_action`` is ``end``, as
:class:`~agentenvs.envs.rendered_env.RenderedEnv` does), add a task's own ending when
a limit stops it, and close the task when the episode ends. The token limits stay
with whoever tokenizes the text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.text import Message, TextEnv, TextStep
from agentenvs.envs.types import SamplerStopReason, StopReason

Observation = str | Message | list[Message] | None


def as_messages(observation: Observation) -> list[Message]:
    """A step's observation as chat messages (a raw string becomes one user turn)."""
    if observation is None:
        return []
    if isinstance(observation, str):
        return [{"role": "user", "content": observation}]
    if isinstance(observation, dict):
        return [dict(observation)]
    return [dict(m) for m in observation]


def plain_text(observation: Observation) -> str:
    """A step's observation as one text: a raw string as it is, messages' contents joined
    by newlines (what a text-only client shows)."""
    if isinstance(observation, str):
        return observation
    return "\n".join(str(m.get("content", "")) for m in as_messages(observation))


class EpisodeRefused(AgentEnvsError, RuntimeError):
    """A start or step the episode cannot take (a task out of range, an episode over or
    never started); the message says why."""


@dataclass
class EpisodeStep:
    """A step's answer with what the wire needs beside it."""

    step: TextStep
    done: bool
    turn: int
    stop_reason: str | None = None
    stops: list[str] = field(default_factory=list)
    """Stop sequences for the next action (none once the episode is over)."""


class TextEpisode:
    """Plays one task of ``config`` at a time (see the module docstring)."""

    def __init__(self, config: EnvConfig) -> None:
        self.config = config
        self.task: TextEnv | None = None
        self.task_id = ""
        self.turns = 0
        self.done = False
        self.stops: list[str] = []
        self.messages: list[Message] = []
        self.tools: list[dict] | None = None

    async def start(self, task_index: int, split: str) -> list[Message]:
        """Open task ``task_index`` of ``split`` (the previous one is closed); its prompt."""
        self.config.check_split(split)
        total = self.config.num_tasks(split)
        if not 0 <= task_index < total:
            raise EpisodeRefused(
                f"task_index {task_index} out of range: split {split!r} has {total} tasks"
            )
        await self.close()
        task = self.config.make_text_env(task_index, split)
        self.task, self.task_id = task, self.config.task_id(task_index, split)
        self.turns, self.done = 0, False
        try:
            await task.start()  # declared on TextEnv: a session, a sandbox, an engine
        except BaseException:  # a failed start leaves nothing open behind it
            await self.close()
            raise
        self.messages = list(task.initial_messages())
        self.stops = list(task.stop_sequences())
        self.tools = task.tools()
        return self.messages

    async def step(self, text: str, stop_reason: SamplerStopReason) -> EpisodeStep:
        if self.done:
            raise EpisodeRefused(f"episode {self.task_id} is over (it ended at turn {self.turns})")
        if self.task is None:
            raise EpisodeRefused("no episode to step: start one first")
        self.turns += 1
        limits = self.config.limits
        if stop_reason == "length" and limits.on_truncated_action == "end":
            ended = TextStep(reward=limits.truncation_reward)
            return await self._end(ended, str(StopReason.MAX_TOKENS), by_limit=True)
        result = await self.task.step(text, stop_reason=stop_reason)
        if result.done:
            return await self._end(result, result.stop_reason or str(StopReason.COMPLETED))
        if self.turns >= limits.max_turns:
            return await self._end(result, str(StopReason.MAX_TURNS), by_limit=True)
        if result.next_stop is not None:
            self.stops = list(result.next_stop)
        return EpisodeStep(result, False, self.turns, None, list(self.stops))

    async def _end(self, result: TextStep, reason: str, *, by_limit: bool = False) -> EpisodeStep:
        if by_limit and self.task is not None:
            ending = self.task.on_limit(reason)
            if ending is not None:
                result = TextStep(
                    observation=result.observation,
                    reward=result.reward + ending.reward,
                    metrics={**ending.metrics, **result.metrics},
                    logs={**ending.logs, **result.logs},
                )
        self.done = True
        await self.close()
        return EpisodeStep(result, True, self.turns, reason, [])

    def release(self) -> TextEnv | None:
        """Take the open task out (for a caller that must close it elsewhere: OpenEnv
        closes synchronously, from a thread); the episode holds none after."""
        task, self.task = self.task, None
        return task

    async def close(self) -> None:
        task = self.release()
        if task is not None:
            await task.close()
