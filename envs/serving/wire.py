"""The env server's request bodies, one pydantic model per endpoint.

Requests are checked here so a bad one is a 422 that names the field
(``body.group_size: Input should be greater than or equal to 1``), before any
environment code runs. Answers are plain JSON dicts built by the app: token ids,
stop conditions, metrics and logs travel as the JSON the in-process objects
dump to, so a remote episode sees the very values an in-process one does (floats
keep their exact ``repr``; NaN travels as the ``NaN`` token stdlib JSON reads back).

Observations travel delta-encoded in step answers: ``keep`` tokens of the context
the client already holds (the previous observation plus the action it sent),
then ``new`` tokens. A multi-turn episode thus costs linear, not quadratic,
bytes on the wire, as it does in the store.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

API_VERSION = 1
"""Bumped when an endpoint's shape changes; ``/v1/info`` says it."""


TokenId = Annotated[int, Field(ge=0, le=2**63 - 1)]
"""A token id as every tokenizer and tensor holds one: not negative, within int64. An id
past the vocabulary is the env's to judge (``RenderedEnv`` ends such an episode with
``out_of_vocabulary``); one no tokenizer can hold is refused here, a 422 naming it."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DatasetRequest(_Body):
    """Which groups: a served env, its config (presets included: ``{"preset": ...}``),
    the split, the group size and how many groups (default: one per task)."""

    env: str = Field(min_length=1)
    config: dict[str, Any] = Field(default_factory=dict)
    split: str = "train"
    group_size: int = Field(ge=1, le=4096)
    n_groups: int | None = Field(default=None, ge=1)

    def cache_key(self) -> str:
        data = self.model_dump(mode="json", include={"env", "config", "split", "group_size"})
        data["n_groups"] = self.n_groups
        return json.dumps(data, sort_keys=True)

    def spec(self) -> DatasetRequest:
        """The dataset part of a request (a group request carries its index too)."""
        return DatasetRequest(
            env=self.env,
            config=self.config,
            split=self.split,
            group_size=self.group_size,
            n_groups=self.n_groups,
        )


class GroupRequest(DatasetRequest):
    """One group of a dataset: its position ``index`` (the task index when
    ``n_groups`` is not given; datasets wrap around their tasks)."""

    index: int = Field(ge=0)


class StepRequest(_Body):
    """One action. ``turn`` is how many steps this episode has taken before it: a step
    sent twice (the client lost the answer) is answered from the server's copy,
    never played twice; a step out of order is refused (409)."""

    action: list[TokenId]
    stop_reason: Literal["stop", "eos", "length"] = "stop"
    turn: int = Field(ge=0)


class ScriptedRequest(_Body):
    variant: str = "oracle"


class RewardsRequest(_Body):
    """The group's finished trajectories (the store's JSON form) and, per trajectory,
    the env that played it (a root or a fork of this group)."""

    env_ids: list[str]
    trajectories: list[dict[str, Any]]


_ENCODER = json.JSONEncoder(allow_nan=True, separators=(",", ":"))
"""Made once: ``json.dumps`` with ``separators`` builds a new encoder per call."""


def dumps(data: Any) -> bytes:
    """JSON as the answers carry it: exact floats, NaN and infinities allowed."""
    return _ENCODER.encode(data).encode()
