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

Text the environment wrote is tokenized apart from the template's markup
(:mod:`agentenvs.envs.tokenizing`): what the world produced after the prompt
(observations, tool output) with every added token split, the prompt's messages
with the special-flagged ones split, so neither can forge ``<|im_end|>`` and
friends; the template's own markup keeps them.
"""

from __future__ import annotations

import copy
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agentenvs.envs.text import Message
from agentenvs.envs.tokenizing import (
    EncodedText,
    EnvTextEncoder,
    Segment,
    SegmentKind,
    slice_segments,
)
from agentenvs.envs.types import ImagePlacement

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
    split_controls: int = 0
    """Control-token strings in environment text that were tokenized as plain text."""
    images: list[ImagePlacement] = field(default_factory=list)
    """Images the new tokens show, offsets into ``tokens`` (:mod:`agentenvs.envs.vision`)."""


# Stands in for an environment message's content while the template renders, so the
# rendering can be cut into template markup and environment text.
_PLACEHOLDER = "\ue000agentenvs-{}\ue001"
_PLACEHOLDER_RE = re.compile("\ue000agentenvs-(\\d+)\ue001")


class Renderer(ABC):
    kind: RendererKind

    def __init__(self, tokenizer: Tokenizer, end_of_turn: list[str] | None = None) -> None:
        self.tokenizer = tokenizer
        if end_of_turn is None:
            end_of_turn = [tokenizer.eos_token] if tokenizer.eos_token else []
        self.end_of_turn = end_of_turn
        self.text = EnvTextEncoder.for_tokenizer(tokenizer)
        self.prompt_split_controls = 0
        """Control strings split in the last :meth:`initial_tokens` prompt."""
        self.prompt_messages = 0
        """How many leading messages of a conversation are the task's prompt."""
        self.prompt_images: list[ImagePlacement] = []
        """Images the last :meth:`initial_tokens` prompt shows."""
        self._last_render: tuple[bool, list[Message], list[dict] | None, str] | None = None

    def initial_tokens(self, messages: list[Message], tools: list[dict] | None = None) -> list[int]:
        self.prompt_messages = len(messages)
        encoded = self.encode_conversation(messages, tools)
        self.prompt_split_controls = encoded.split_controls
        self.prompt_images = encoded.images
        return encoded.tokens

    def _kind(self, index: int, message: Message) -> SegmentKind | None:
        """Who wrote a message's content: None for the policy (assistant turns)."""
        if not _env_content(message):
            return None
        return "prompt" if index < self.prompt_messages else "world"

    def encode_conversation(
        self,
        messages: list[Message],
        tools: list[dict] | None,
        *,
        rendered: str | None = None,
        start: int = 0,
    ) -> EncodedText:
        """The template's rendering of ``messages`` (with the generation prompt) from
        character ``start`` on, with environment-written contents tokenized apart."""
        if rendered is None:
            rendered = self.render_text(messages, tools, add_generation_prompt=True)
        to_split = sum(
            self.text.count_controls(m["content"], kind)
            for i, m in enumerate(messages)
            if (kind := self._kind(i, m)) is not None
        )
        if not to_split:
            return EncodedText(self.encode(rendered[start:]))  # nothing to split: plain encode
        segments = self._segments(messages, tools, rendered)
        return self.text.encode_segments(slice_segments(segments, start))

    def _segments(
        self, messages: list[Message], tools: list[dict] | None, rendered: str
    ) -> list[Segment]:
        """Cut ``rendered`` into markup and environment contents.

        The template renders once more with a placeholder in each environment
        message's content; where that does not reproduce ``rendered`` (a template
        that inspects contents), each content is looked up in order instead.
        """
        kinds = [self._kind(i, m) for i, m in enumerate(messages)]
        marked = [
            m if kind is None else {**m, "content": _PLACEHOLDER.format(i)}
            for i, (m, kind) in enumerate(zip(messages, kinds, strict=True))
        ]
        parts = _PLACEHOLDER_RE.split(self._render(marked, tools, add_generation_prompt=True))
        segments: list[Segment] = []
        for k, part in enumerate(parts):
            if k % 2 == 0:
                segments.append((part, "markup"))
            else:
                index = int(part)
                segments.append((messages[index]["content"], kinds[index] or "markup"))
        if "".join(text for text, _ in segments) == rendered:
            return segments
        segments, cursor = [], 0
        for message, kind in zip(messages, kinds, strict=True):
            if kind is None:
                continue
            at = rendered.find(message["content"], cursor)
            if at < 0:
                continue
            segments += [(rendered[cursor:at], "markup"), (message["content"], kind)]
            cursor = at + len(message["content"])
        segments.append((rendered[cursor:], "markup"))
        return segments

    def _has_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

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
        if not self._has_template():
            # No template: a plain transcript, with the prompt left open for the model.
            text = "\n\n".join(str(m.get("content", "")) for m in messages)
            return text + ("\n\n" if add_generation_prompt else "")
        kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": add_generation_prompt}
        if tools:
            kwargs["tools"] = tools
        return self.tokenizer.apply_chat_template(messages, **kwargs)

    def encode(self, text: str) -> list[int]:
        """Text whose control strings are meant as control tokens (markup, actions)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []

    @property
    def vocabulary_size(self) -> int | None:
        """Ids the tokenizer can decode: a sampled id at or past this is not a token."""
        return self.text.vocabulary_size

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=False)

    def split_action(self, tokens: list[int]) -> tuple[str, str]:
        """Decoded action as (content, end-of-turn marker the model emitted or "").

        A marker that is a control token (``<|im_end|>``) was emitted only if the
        action ends with that token: the same characters spelled out by ordinary
        tokens are content, and the template's own closing still follows them.
        """
        text = self.decode(tokens)
        for marker in self.end_of_turn:
            if marker and text.endswith(marker) and self._marker_sampled(tokens, marker):
                return text[: -len(marker)], marker
        return text, ""

    def _marker_sampled(self, tokens: list[int], marker: str) -> bool:
        control = self.text.controls.get(marker)
        return control is None or (bool(tokens) and tokens[-1] == control)

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
        encoded = self.text.encode_env(text)
        return Appended(encoded.tokens, split_controls=encoded.split_controls)


class ChatRenderer(Renderer):
    kind: RendererKind = "chat"

    def append(self, history, tools, action_content, action_marker, observation) -> Appended:
        """Extend the context with the template's text after the sampled action.

        Extension is judged against the real next prompt (the conversation with the
        new messages and the generation prompt): it must start with the prompt the
        model saw followed by its content. Rendering the assistant turn as the last
        message instead would judge a framing the model never sees (Qwen3 writes an
        empty think block around a final assistant turn, not around one followed by
        a tool result) and declare breaks where there are none.
        """
        new_messages = _as_messages(observation)
        assistant: Message = {"role": "assistant", "content": action_content}
        opened = self.render_text(history, tools, add_generation_prompt=True)
        conversation = [*history, assistant, *new_messages]
        full = self.render_text(conversation, tools, add_generation_prompt=True)
        history.append(assistant)
        history.extend(new_messages)
        # Counted over the new messages only: a restart re-encodes the prompt too.
        split = sum(self.text.count_controls(m["content"]) for m in new_messages if _env_content(m))
        head = opened + action_content
        if not full.startswith(head):
            encoded = self.encode_conversation(conversation, tools, rendered=full)
            return Appended(
                encoded.tokens, restart=True, split_controls=split, images=encoded.images
            )
        # The template closes the assistant turn; the part of that closing the model
        # already emitted (its end-of-turn token) is not repeated.
        start = len(head)
        if action_marker and full.startswith(action_marker, start):
            start += len(action_marker)
        encoded = self.encode_conversation(conversation, tools, rendered=full, start=start)
        return Appended(encoded.tokens, split_controls=split, images=encoded.images)


def make_renderer(
    kind: RendererKind, tokenizer: Tokenizer, end_of_turn: list[str] | None = None
) -> Renderer:
    """The renderer of ``kind``, able to show image parts (:mod:`agentenvs.envs.vision`;
    without one it renders exactly as the plain renderer, and a tokenizer without image
    tokens refuses an image clearly when one comes)."""
    from agentenvs.envs.vision.render import vision_renderer

    return vision_renderer(kind, tokenizer, end_of_turn)


def _as_messages(observation: str | Message | list[Message]) -> list[Message]:
    if isinstance(observation, str):
        return [{"role": "user", "content": observation}]
    if isinstance(observation, dict):
        return [observation]
    return list(observation)


def _env_content(message: Message) -> bool:
    """Whether a message's content was written by the environment (the world), not
    sampled by the policy: every role but the assistant's."""
    return message.get("role") != "assistant" and isinstance(message.get("content"), str)


def _message_text(observation: Message | list[Message]) -> str:
    return "".join(str(m.get("content", "")) for m in _as_messages(observation))


def _append_assistant_text(history: list[Message], text: str) -> None:
    if history and history[-1].get("role") == "assistant":
        history[-1] = {**history[-1], "content": history[-1]["content"] + text}
    else:
        history.append({"role": "assistant", "content": text})
