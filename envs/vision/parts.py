"""Image content parts in chat messages, as a text environment writes them.

A message's ``content`` may be a list of parts instead of a string, the shape chat
templates and OpenAI-style APIs use: ``{"type": "text", "text": ...}`` and
``{"type": "image", "image": ...}`` (a PIL image, PNG/JPEG bytes, a file path or an
:class:`~agentenvs.envs.types.ImageRef`). A tool that answers with a picture returns
such a message (:func:`tool_message`). Anything else in a part is refused with a
clear error, since a silently dropped image would train the model on a context it
never saw.
"""

from __future__ import annotations

from typing import Any

from agentenvs.envs.text import Message
from agentenvs.envs.types import ImageRef
from agentenvs.envs.vision.images import ImageError, image_ref


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def image_part(image: Any) -> dict[str, Any]:
    """An image part; the image is decoded, bounded and named now (:func:`image_ref`)."""
    return {"type": "image", "image": image_ref(image)}


def tool_message(text: str, images: list[Any], role: str = "tool") -> Message:
    """A tool's answer showing images after its text (a crop, a plot)."""
    return {"role": role, "content": [text_part(text), *(image_part(i) for i in images)]}


def has_parts(message: Message) -> bool:
    return isinstance(message.get("content"), list)


def part_items(message: Message) -> list[str | ImageRef]:
    """A message's parts in order as text and images (images decoded and named)."""
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        raise ImageError(f"message content must be a string or a list of parts, got {content!r}")
    items: list[str | ImageRef] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            items.append(part["text"])
        elif kind == "image" and "image" in part:
            items.append(image_ref(part["image"]))
        else:
            raise ImageError(
                f"unknown content part {part!r}: use {{'type': 'text', 'text': ...}} or "
                "{'type': 'image', 'image': ...}"
            )
    return items


def message_images(messages: list[Message]) -> list[ImageRef]:
    """Every image the messages show, in order."""
    return [
        item
        for m in messages
        if has_parts(m)
        for item in part_items(m)
        if isinstance(item, ImageRef)
    ]
