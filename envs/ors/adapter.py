"""Any ORS environment as one of ours: its session under our collector.

An episode opens a session with the ``openreward`` SDK's own client
(``AsyncEnvironmentsAPI(...).get(name).session(split=..., index=...)``: the
``/create_session`` + ``/create`` handshake, the keep-alive pings, ``/delete`` at the
end), shows the model the task's messages and tool list, and plays each reply as a
:class:`TextEnv`: the tool calls in it are read with the configured parser
(``tool_format``, hermes by default), each is sent to the server's ``/call`` in
order, and the outputs come back as ``tool`` messages that our renderer tokenizes
after the sampled tokens (observation tokens, masked from the loss). The step's
reward is the sum of the calls' ORS rewards; ``finished`` ends the episode. A reply
with no tool call goes to the environment's ``@terminal`` tool when it has one, and
otherwise ends the episode unrewarded (``ors_no_tool_call``). Every attempt is
recorded in the shared ``tool_calls`` log that ``agentenvs check`` audits.

Failures: a server that cannot be reached is :class:`ORSUnreachable` (transient: the
collector retries the group with fresh sessions); a tool whose code raised on the
server (the SDK's ``ToolFailed``, which also ends the session) fails the group with
the server's message; a call the server refuses as malformed (unknown tool, invalid
input, after the episode finished) is the model's doing and is answered as an error
tool message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentenvs.envs.errors import AgentEnvsError, TransientError
from agentenvs.envs.rendered_env import RenderedEnv
from agentenvs.envs.text import Message, TextEnv, TextStep
from agentenvs.envs.tool_calls import ToolCallAttempt, ToolOutcome, parse, step_logs, tools_of
from agentenvs.envs.types import Metrics, SamplerStopReason, StopReason

if TYPE_CHECKING:
    from openreward import AsyncEnvironmentsAPI
    from openreward.api.environments.client import AsyncSession
    from openreward.api.environments.types import (
        MessageBlock,
        TerminalToolSpec,
        ToolOutput,
        ToolSpec,
    )

    from agentenvs.envs.ors.config import ORSConfig


class ORSUnreachable(TransientError, ConnectionError):
    """The ORS server could not be reached or dropped the session's connection."""


class ORSToolFailed(AgentEnvsError, RuntimeError):
    """A tool's own code raised on the ORS server; the message is the server's."""


def chat_tool(spec: ToolSpec) -> dict[str, Any]:
    """An ORS ``ToolSpec`` as the chat template's function tool."""
    parameters = dict(spec.input_schema or {"type": "object", "properties": {}})
    parameters.pop("title", None)
    return {
        "type": "function",
        "function": {"name": spec.name, "description": spec.description, "parameters": parameters},
    }


def blocks_text(blocks: Sequence[MessageBlock]) -> tuple[str, int]:
    """The text of ORS content blocks (the SDK client's block classes) and how many images
    were left out: a text renderer cannot show an image, a reasoning segment or a tool call
    of the prompt's history, so each leaves a placeholder; a tool result shows its own blocks."""
    from openreward.api.environments.types import ImageBlock, TextBlock, ToolResultBlock

    texts, images = [], 0
    for block in blocks:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolResultBlock):
            inner, inner_images = blocks_text(block.blocks)
            texts.append(inner)
            images += inner_images
        else:
            images += isinstance(block, ImageBlock)
            texts.append(f"[{block.type} omitted]")
    return "\n".join(texts), images


def _transport_errors() -> tuple[type[BaseException], ...]:
    import aiohttp
    from openreward.api.errors import SessionTerminatedError, TransportError

    return (aiohttp.ClientError, TransportError, SessionTerminatedError, ConnectionError,
            TimeoutError)  # fmt: skip


class ORSTextEnv(TextEnv):
    """One episode of an ORS environment. :meth:`start` (which every driver awaits before
    the prompt) opens the session and reads the prompt and tools."""

    def __init__(self, config: ORSConfig, split: str, task_index: int) -> None:
        self.config = config
        self.split = split
        self.task_index = task_index
        self.api: AsyncEnvironmentsAPI | None = None
        self.session: AsyncSession | None = None
        self.messages: list[Message] = []
        self.specs: list[dict[str, Any]] = []
        self.terminal: TerminalToolSpec | None = None
        self.turns = 0

    async def start(self) -> None:
        from agentenvs.envs.ors.sdk import load_sdk

        load_sdk()
        from openreward import AsyncEnvironmentsAPI

        await self.close()
        url, name = self.config.url, self.config.environment_name()
        self.api = AsyncEnvironmentsAPI(base_url=url, api_key=self.config.token)  # type: ignore[arg-type]
        environment = self.api.get(name, variant=name, base_url=url)
        self.session = environment.session(split=self.split, index=self.task_index)
        try:
            await self.session.__aenter__()
            prompt = await self.session.get_messages()
            self.specs = [chat_tool(s) for s in await self.session.list_tools()]
            self.terminal = await self.session.terminal_tool()
        except _transport_errors() as err:
            raise ORSUnreachable(f"ORS server {url} ({name}): {type(err).__name__}: {err}") from err
        self.messages = []
        if self.config.instructions:
            self.messages.append({"role": "system", "content": self.config.instructions})
        for message in prompt:
            text, _ = blocks_text(message.blocks)
            self.messages.append({"role": message.role, "content": text})

    def initial_messages(self) -> list[Message]:
        return list(self.messages)

    def tools(self) -> list[dict[str, Any]] | None:
        return list(self.specs) or None

    async def step(self, action_text: str, *, stop_reason: SamplerStopReason) -> TextStep:
        self.turns += 1
        attempts = parse(
            action_text,
            self.config.tool_format,
            tools=tools_of(self.specs),
            max_calls=self.config.max_calls_per_turn,
            stopped_on_sequence=stop_reason == "stop",
        )
        if not attempts:
            return await self._final(action_text)
        replies: list[Message] = []
        recorded: list[ToolCallAttempt] = []
        metrics: Metrics = {"tool/calls": 0, "tool/ok": 0, "tool/errors": 0,
                            "tool/parse_errors": 0, "ors/images_omitted": 0}  # fmt: skip
        reward, finished = 0.0, False
        for attempt in attempts:
            if finished:  # the episode ended on an earlier call of this reply
                recorded.append(attempt.with_outcome(ToolOutcome.NOT_RUN, "episode finished"))
                continue
            if not attempt.parsed or attempt.name is None:
                metrics["tool/parse_errors"] += 1
                text = f"Error: could not read the tool call ({attempt.status}): {attempt.detail}"
                replies.append({"role": "tool", "content": text})
                recorded.append(attempt)
                continue
            metrics["tool/calls"] += 1
            output, error = await self._call(attempt.name, dict(attempt.arguments or {}))
            if output is None:
                metrics["tool/errors"] += 1
                replies.append({"role": "tool", "content": f"Error: {error}"})
                recorded.append(attempt.with_outcome(ToolOutcome.ERROR, error))
                continue
            metrics["tool/ok"] += 1
            text, images = blocks_text(output.blocks)
            metrics["ors/images_omitted"] += images
            replies.append({"role": "tool", "content": text})
            recorded.append(attempt.with_outcome(ToolOutcome.OK))
            reward += float(output.reward or 0.0)
            finished = bool(output.finished)
        logs = step_logs(recorded, [self.config.tool_format])
        if finished:
            return TextStep(observation=replies, reward=reward, done=True,
                            stop_reason=StopReason.COMPLETED, metrics=metrics, logs=logs)  # fmt: skip
        return TextStep(observation=replies, reward=reward, metrics=metrics, logs=logs)

    async def _call(self, name: str, arguments: dict[str, Any]) -> tuple[ToolOutput | None, str]:
        """The tool's output, or None and why the server refused the call."""
        from openreward.api.errors import ToolCallError, ToolFailed

        if self.session is None:
            raise RuntimeError("ORSTextEnv.start() must run before a step")
        try:
            output = await asyncio.wait_for(
                self.session.call_tool(name, arguments), self.config.call_timeout
            )
        except ToolCallError as err:  # malformed: the model's to fix
            return None, f"{err.reason}: {err.detail}"
        except ToolFailed as err:
            raise ORSToolFailed(f"ORS tool {name!r} raised on {self.config.url}: {err}") from err
        except _transport_errors() as err:
            raise ORSUnreachable(f"ORS server {self.config.url}: {name}: {err!r}") from err
        return output, ""

    async def _final(self, action_text: str) -> TextStep:
        """A reply without a tool call: the terminal tool's, or the end, unrewarded."""
        if self.terminal is None:
            return TextStep(done=True, stop_reason=StopReason.COMPLETED,
                            metrics={"ors_no_tool_call": 1})  # fmt: skip
        arguments = {} if self.terminal.arg is None else {self.terminal.arg: action_text}
        output, error = await self._call(self.terminal.name, arguments)
        logs = {"ors_terminal_tool": self.terminal.name}
        if output is None:
            return TextStep(done=True, stop_reason=StopReason.COMPLETED,
                            logs={**logs, "ors_terminal_error": error})  # fmt: skip
        text, _ = blocks_text(output.blocks)
        return TextStep(
            reward=float(output.reward or 0.0),
            done=True,
            stop_reason=StopReason.COMPLETED,
            logs={**logs, "ors_final_output": text},
        )

    def scripted_action(self, variant: str = "oracle") -> str | None:
        """The config's ``script``, one action per turn (there is no oracle of ours)."""
        if variant != "oracle" or self.turns >= len(self.config.script):
            return None
        return self.config.script[self.turns]

    async def close(self) -> None:
        session, api = self.session, self.api
        self.session, self.api = None, None
        try:
            if session is not None:
                await session.__aexit__(None, None, None)
        finally:
            if api is not None:
                await api.aclose()


class ORSRenderedEnv(RenderedEnv):
    """An ORS episode at the token level, named for its server in records."""

    task: ORSTextEnv

    def label(self) -> str:
        return f"ORS({self.task.config.url})"
