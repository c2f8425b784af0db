"""Every registered environment as a text-in/text-out gymnasium ``Env``.

For gym-style loops that act in strings: ``reset`` gives the prompt text, ``step``
takes the action text. It runs the same :class:`TextEnv` task logic the token-level
path uses, on a private event loop, so it is synchronous like gymnasium expects.
"""

from __future__ import annotations

import asyncio
from typing import Any

import gymnasium
from gymnasium import spaces

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.text import Message, TextEnv

_MAX_TEXT = 1_000_000


class NotTextError(AgentEnvsError, TypeError):
    """``gymnasium.make`` of an environment whose episodes are not text episodes."""


class NoTasksError(AgentEnvsError, ValueError):
    """The configured environment has no task to reset to (``mcp_tools`` without tasks)."""


def _text(observation: str | Message | list[Message] | None) -> str:
    if observation is None:
        return ""
    if isinstance(observation, str):
        return observation
    messages = [observation] if isinstance(observation, dict) else observation
    return "\n".join(_content_text(m.get("content", "")) for m in messages)


def _content_text(content: Any) -> str:
    """A message's text; an image part reads ``<image>`` (the pixels are in ``info``)."""
    if not isinstance(content, list):
        return str(content)
    return "".join(p.get("text", "") if p.get("type") == "text" else "<image>" for p in content)


class _UnicodeText(spaces.Text):
    """Any Unicode string up to ``max_length`` (empty included: a final observation is "").

    gymnasium's ``Text`` tests membership against a finite charset, but observations
    here are arbitrary text (retrieved passages, program output, any script), so
    membership checks only type and length; ``sample()`` still draws from the charset.
    """

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        # gymnasium's own repr lists the whole charset: a million characters here.
        return f"Text({self.min_length}..{self.max_length} characters of any Unicode)"


class TextGymEnv(gymnasium.Env):
    """A registered environment's episodes as gymnasium's ``Env`` (text in, text out).

    ``gymnasium.make("agentenvs/<Name>-v0", **config)`` passes ``config`` to the
    environment's :class:`~agentenvs.envs.config.EnvConfig` (``split`` chooses the
    tasks); ``render_mode="ansi"`` is the one render mode (the transcript as text).
    ``reset`` opens the task (:meth:`TextEnv.start`: an OpenEnv session, MCP servers)
    and gives its prompt; ``options={"task_index": i}`` picks the task, otherwise the
    seeded ``np_random`` does.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        env_name: str,
        split: str = "train",
        render_mode: str | None = None,
        **config: Any,
    ) -> None:
        from agentenvs.envs.registry import make

        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode {render_mode!r}: agentenvs envs render 'ansi' only")
        self.render_mode = render_mode
        self.env_name = env_name
        self.split = split
        self.config = make(env_name, **config)
        if not self.config.plays_as_text:
            raise NotTextError(
                f"{env_name!r} has no text episodes for gymnasium to step (its episodes are "
                "token-level, driven from inside): run it with `agentenvs rollout` or a collector"
            )
        self.config.check_split(split)
        self.observation_space = _UnicodeText(max_length=_MAX_TEXT, min_length=0, charset=_ALL)
        self.action_space = _UnicodeText(max_length=_MAX_TEXT, min_length=0, charset=_ALL)
        self._loop = asyncio.new_event_loop()
        self._task: TextEnv | None = None
        self._turns = 0
        self._transcript: list[str] = []

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._close_task()
        total = self.config.num_tasks(self.split)
        if total <= 0:
            raise NoTasksError(
                f"environment {self.env_name!r} has no tasks in split {self.split!r}: give it "
                f"some in the config (gymnasium.make(..., key=value); its keys: "
                f"{', '.join(sorted(type(self.config).model_fields))})"
            )
        index = (options or {}).get("task_index")
        if index is None:
            index = int(self.np_random.integers(total))
        task = self.config.make_text_env(int(index), self.split)
        try:  # a task that connects first (OpenEnv, MCP tools) does it here
            self._loop.run_until_complete(task.start())
        except BaseException:
            self._loop.run_until_complete(task.close())
            raise
        self._task = task
        messages = task.initial_messages()
        self._turns = 0
        prompt = _text(messages[-1]) if messages else ""
        self._transcript = [prompt]
        info = {
            "messages": messages,
            "task_id": self.config.task_id(int(index), self.split),
            "stop_sequences": task.stop_sequences(),
        }
        return prompt, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        result = self._loop.run_until_complete(self._task.step(action, stop_reason="stop"))
        self._turns += 1
        observation = _text(result.observation)
        self._transcript += [action, observation]
        truncated = not result.done and self._turns >= self.config.limits.max_turns
        info: dict[str, Any] = {"metrics": result.metrics, "logs": result.logs}
        if result.done or truncated:
            info["stop_reason"] = result.stop_reason or (
                "completed" if result.done else "max_turns"
            )
            self._close_task()
        return observation, float(result.reward), bool(result.done), truncated, info

    def render(self) -> str:
        return "\n".join(self._transcript)

    def _close_task(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            self._loop.run_until_complete(task.close())

    def close(self) -> None:
        self._close_task()
        if not self._loop.is_closed():
            # Shared clients (a sandbox pool, an HTTP retriever) close with their loop.
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()


_ALL = frozenset(chr(c) for c in range(32, 0x2FFF)) | frozenset("\n\t")
