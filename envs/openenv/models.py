"""The action and observation shapes our text environments have on OpenEnv's wire.

OpenEnv types each environment's messages with pydantic models derived from its own
``Action`` and ``Observation`` (``extra="forbid"``: a misspelt field is a 422, not a
silent default). Ours carry text, because OpenEnv is text-level: the token ids the
policy sampled stay on the client's side and the server sees the decoded action.

OpenEnv's serializer drops ``Observation.metadata`` from what it sends, so the step's
metrics and logs travel in fields of their own.
"""

from __future__ import annotations

from typing import Any, Literal

from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class TextAction(Action):
    """One action: the decoded text the policy wrote, end-of-turn marker removed."""

    text: str = Field(..., description="The action's text, as the model wrote it.")
    stop_reason: Literal["stop", "eos", "length"] = Field(
        "stop",
        description="Why the sampler stopped: a stop sequence, the end-of-sequence token, "
        "or the token cap (length: the action was cut off).",
    )


class TextObservation(Observation):
    """What the environment answered (the prompt at reset, a step's observation after).

    ``messages`` are chat messages to append (at reset: the whole prompt); ``text`` is
    the same as plain text, which a continuation protocol (``<information>``,
    ``<interpreter>`` blocks) appends inside the assistant turn as it is.
    """

    text: str = Field("", description="The observation as plain text.")
    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="The observation as chat messages (role, content)."
    )
    raw_text: bool = Field(
        False,
        description="The environment answered with a raw string (a continuation block), "
        "not chat messages; `messages` then holds it as one user turn.",
    )
    tools: list[dict[str, Any]] | None = Field(
        None, description="JSON-schema tool specs for the chat template (reset only)."
    )
    stop: list[str] = Field(default_factory=list, description="Stop sequences for the next action.")
    renderer: Literal["chat", "continuation"] = Field(
        "chat", description="How the environment expects its text rendered into tokens."
    )
    task_id: str = Field("", description="The task this episode plays (split/index).")
    turn: int = Field(0, description="Actions taken so far in this episode.")
    stop_reason: str | None = Field(None, description="Why the episode ended, once done.")
    metrics: dict[str, float] = Field(default_factory=dict, description="The step's metrics.")
    logs: dict[str, str | int | float] = Field(default_factory=dict, description="The step's logs.")
