"""Renderers turn the text a task produces into tokens appended to the policy's context.

Token-in/token-out is the rule here: tokens the policy sampled are never decoded
and re-encoded into the context, and earlier turns are never re-rendered. Each
observation is tokenized on its own and appended. Two protocols are needed:

* :class:`ContinuationRenderer` appends raw text inside the same assistant turn
  (Search-R1's ``<information>`` and ReTool's ``<interpreter>`` blocks).
* :class:`ChatRenderer` appends new chat messages rendered by the tokenizer's own
  chat template: it renders the conversation with and without the new messages
  and appends only the suffix. A template that does not extend a conversation
  (one that drops earlier ``<think>`` blocks, say) is detected; the renderer then
  starts a fresh sample from the full re-rendering instead of drifting silently.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agentenvs.envs.text import Message

RendererKind = Literal["continuation", "chat"]


class Tokenizer(Protocol):
    """The part of a Hugging Face tokenizer the renderers use."""

    eos_token: str | None
    chat_template: str | None

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


@dataclass
class Appended:
    """Tokens to add to the context after an observation.

    ``restart`` means the template could not extend the conversation: ``tokens`` is
    then the whole new context, not a suffix, and a new training sample begins.
    """

    tokens: list[int]
    restart: bool = False


class Renderer(ABC):
    kind: RendererKind

    def __init__(self, tokenizer: Tokenizer, end_of_turn: list[str] | None = None) -> None:
        self.tokenizer = tokenizer
        if end_of_turn is None:
            end_of_turn = [tokenizer.eos_token] if tokenizer.eos_token else []
        self.end_of_turn = end_of_turn
        self._last_render: tuple[bool, list[Message], list[dict] | None, str] | None = None

    def initial_tokens(self, messages: list[Message], tools: list[dict] | None = None) -> list[int]:
        return self.encode(self.render_text(messages, tools, add_generation_prompt=True))

    def render_text(
        self, messages: list[Message], tools: list[dict] | None, *, add_generation_prompt: bool
    ) -> str:
        """The template's rendering, remembering the last one.

        Each chat turn renders the conversation the model saw, which is the previous
        turn's rendering with the generation prompt: the memo turns that full re-render
        into a list comparison. It compares the messages themselves, so it never
        returns a rendering of another conversation.
        """
        last = self._last_render
        if (
            last is not None
            and last[0] == add_generation_prompt
            and last[1] == messages
            and last[2] == tools
        ):
            return last[3]
        text = self._render(messages, tools, add_generation_prompt=add_generation_prompt)
        snapshot = [dict(m) for m in messages]
        self._last_render = (add_generation_prompt, snapshot, copy.deepcopy(tools), text)
        return text

    def _render(
        self, messages: list[Message], tools: list[dict] | None, *, add_generation_prompt: bool
    ) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            # No template: a plain transcript, with the prompt left open for the model.
            text = "\n\n".join(str(m.get("content", "")) for m in messages)
            return text + ("\n\n" if add_generation_prompt else "")
        kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": add_generation_prompt}
        if tools:
            kwargs["tools"] = tools
        return self.tokenizer.apply_chat_template(messages, **kwargs)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=False)

    def split_action(self, tokens: list[int]) -> tuple[str, str]:
        """Decoded action as (content, end-of-turn marker the model emitted or "")."""
        text = self.decode(tokens)
        for marker in self.end_of_turn:
            if marker and text.endswith(marker):
                return text[: -len(marker)], marker
        return text, ""

    def stop_condition(self, env_stops: list[str]) -> list[str]:
        stops = list(env_stops)
        stops.extend(m for m in self.end_of_turn if m and m not in stops)
        return stops

    def end_of_turn_tokens(self) -> list[int]:
        """Tokens a scripted policy appends to end its turn the way a model would."""
        return self.encode(self.end_of_turn[0]) if self.end_of_turn else []

    @abstractmethod
    def append(
        self,
        history: list[Message],
        tools: list[dict] | None,
        action_content: str,
        action_marker: str,
        observation: str | Message | list[Message],
    ) -> Appended:
        """Tokens that follow the sampled action so the model sees ``observation``.

        ``history`` holds the messages before this action and is updated in place
        with the assistant turn and the observation, for renderers that need it.
        """


class ContinuationRenderer(Renderer):
    kind: RendererKind = "continuation"

    def append(self, history, tools, action_content, action_marker, observation) -> Appended:
        text = observation if isinstance(observation, str) else _message_text(observation)
        _append_assistant_text(history, action_content + text)
        return Appended(self.encode(text))


class ChatRenderer(Renderer):
    kind: RendererKind = "chat"

    def append(self, history, tools, action_content, action_marker, observation) -> Appended:
        new_messages = _as_messages(observation)
        assistant: Message = {"role": "assistant", "content": action_content}
        opened = self.render_text(history, tools, add_generation_prompt=True)
        base = self.render_text([*history, assistant], tools, add_generation_prompt=False)
        full = self.render_text(
            [*history, assistant, *new_messages], tools, add_generation_prompt=True
        )
        history.append(assistant)
        history.extend(new_messages)
        closing = _closing_after(base, opened, action_content)
        if closing is None or not full.startswith(base):
            return Appended(self.encode(full), restart=True)
        # The template closes the assistant turn with ``closing``; the part the model
        # already emitted (its end-of-turn token) is not repeated.
        bridge = closing[len(action_marker) :] if closing.startswith(action_marker) else closing
        return Appended(self.encode(bridge + full[len(base) :]))


def make_renderer(
    kind: RendererKind, tokenizer: Tokenizer, end_of_turn: list[str] | None = None
) -> Renderer:
    renderers: dict[str, type[Renderer]] = {
        "continuation": ContinuationRenderer,
        "chat": ChatRenderer,
    }
    if kind not in renderers:
        raise ValueError(f"unknown renderer {kind!r}; choose one of {sorted(renderers)}")
    return renderers[kind](tokenizer, end_of_turn)


def _closing_after(rendered: str, opened: str, content: str) -> str | None:
    """What the template writes after the assistant content, or None if the rendering
    is not the open turn the model saw followed by the content verbatim (the template
    rewrote the turn).

    ``opened`` is the conversation rendered with the generation prompt: the context
    the model sampled after. Searching for the content in the rendering instead would
    match inside the template's own closing text for short actions (``m`` in
    ``<|im_end|>``), or fail for empty ones.
    """
    head = opened + content
    if not rendered.startswith(head):
        return None
    return rendered[len(head) :]


def _as_messages(observation: str | Message | list[Message]) -> list[Message]:
    if isinstance(observation, str):
        return [{"role": "user", "content": observation}]
    if isinstance(observation, dict):
        return [observation]
    return list(observation)


def _message_text(observation: Message | list[Message]) -> str:
    return "".join(str(m.get("content", "")) for m in _as_messages(observation))


def _append_assistant_text(history: list[Message], text: str) -> None:
    if history and history[-1].get("role") == "assistant":
        history[-1] = {**history[-1], "content": history[-1]["content"] + text}
    else:
        history.append({"role": "assistant", "content": text})
