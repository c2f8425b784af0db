"""The text-level layer: environment authors write task logic in strings, not tokens.

A :class:`TextEnv` sees the decoded text of each action and answers with text (or a
chat message). :class:`agentenvs.envs.rendered_env.RenderedEnv` turns it into a
token-level :class:`~agentenvs.envs.types.Env` through a renderer, enforcing the
shared limits. Task logic never touches token ids, so it cannot break the
token-in/token-out rule.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from agentenvs.envs.types import ForkUnsupported, Logs, Metrics, SamplerStopReason

Message: TypeAlias = dict[str, Any]
"""A chat message as Hugging Face chat templates take it: ``{"role": ..., "content": ...}``."""


@dataclass
class TextStep:
    """The environment's answer to one action.

    ``observation`` is appended to the context: a string is raw text (continuation
    protocols such as ``<information>`` or ``<interpreter>`` blocks, or a user
    message under a chat renderer); a message or list of messages becomes new
    chat turns. ``None`` appends nothing.
    """

    observation: str | Message | list[Message] | None = None
    reward: float = 0.0
    done: bool = False
    stop_reason: str | None = None
    next_stop: list[str] | None = None
    """Replaces the env's stop sequences for the next turn (None keeps them)."""
    metrics: Metrics = field(default_factory=dict)
    logs: Logs = field(default_factory=dict)


class TextEnv(ABC):
    """One episode of task logic over text. Single-use, like :class:`Env`.

    Two methods are required: :meth:`initial_messages` (the prompt) and :meth:`step`
    (answer one action). Everything else a driver may call is declared here, with a
    default that means "not offered"; override what your task can do. The drivers
    (:class:`~agentenvs.envs.rendered_env.RenderedEnv` for the token level, the
    gymnasium adapter, the OpenEnv server) never look for undeclared attributes.

    * :meth:`start`: open what the episode needs before its prompt exists (a server
      session, MCP tools whose list the prompt shows, a leased game engine);
    * :meth:`stop_sequences`, :meth:`tools`: what the sampler stops on, and the tool
      specs the chat template renders;
    * :meth:`on_limit`: score an episode a shared limit ended;
    * :meth:`scripted_action`: the task's own scripted answer (demos, tests);
    * :meth:`fork`: an independent copy, for tree rollouts;
    * :meth:`close`: release per-episode resources; always called.

    A driver calls them in this order: ``start``, ``initial_messages``, then ``step``
    until one answers ``done`` (or a limit ends the episode), then ``close``::

        class Echo(TextEnv):
            def initial_messages(self):
                return [{"role": "user", "content": "Say hi."}]

            async def step(self, action_text, *, stop_reason):
                return TextStep(reward=float("hi" in action_text.lower()), done=True)

        env = Echo()
        await env.start()
        prompt = env.initial_messages()
        result = await env.step("Hi!", stop_reason="eos")  # reward 1.0, done
        await env.close()

    Errors follow :class:`~agentenvs.envs.types.Env`: an exception fails the group and
    is not retried; raise a :class:`~agentenvs.envs.errors.TransientError` for a
    failure of the moment (a tool server that died), and the group is retried.
    """

    async def start(self) -> None:
        """Open what the episode needs before its prompt (default: nothing).

        Called once, before :meth:`initial_messages`, by every driver. Tasks whose
        prompt comes from elsewhere connect here: an OpenEnv session (the prompt is its
        reset answer), MCP servers (the prompt lists their tools), a game engine. If it
        raises, the driver closes the env and the error stands (a
        :class:`~agentenvs.envs.errors.TransientError` is retried)."""

    @abstractmethod
    def initial_messages(self) -> list[Message]:
        """The prompt as chat messages (system and user turns)."""

    @abstractmethod
    async def step(self, action_text: str, *, stop_reason: SamplerStopReason) -> TextStep:
        """React to one action. ``action_text`` has end-of-turn markers removed.

        Malformed actions must be answered (a hint, a penalty, or ``done`` with a
        stop reason), never raised: the model wrote them, not the programmer.
        """

    def stop_sequences(self) -> list[str]:
        """Strings that end a turn besides the renderer's end-of-turn marker."""
        return []

    def tools(self) -> list[dict[str, Any]] | None:
        """JSON-schema tool specs handed to the chat template, if the task has tools."""
        return None

    def scripted_action(self, variant: str = "oracle") -> str | None:
        """The next action of the environment's own scripted policy, as text.

        ``oracle`` must solve the task; environments may offer other variants
        (``wrong``, ``hostile``, ``malformed``) for tests. ``None`` means the
        variant is unknown.
        """
        return None

    def on_limit(self, reason: str) -> TextStep | None:
        """The shared limits ended the episode before the task did.

        ``reason`` is ``max_tokens``, ``context_overflow`` or ``max_turns``. The reward
        and metrics of the returned step are added to the final step, so a task can
        score a cut-off episode like a wrong answer and still report its own metrics.
        None adds nothing.
        """
        return None

    async def fork(self) -> TextEnv:
        """An independent copy of this episode's task state (see :meth:`Env.fork`).

        Shared read-only parts (a retriever, a dataset row, the config) may be shared;
        anything a later step changes must be copied, including external state (a
        sandbox session, a game engine). The default raises ``ForkUnsupported``.
        """
        raise ForkUnsupported(f"{type(self).__name__} does not implement fork()")

    async def close(self) -> None:
        """Release per-episode resources (a sandbox session, a game worker)."""
