"""Split an environment's stop condition into stop strings and stop token ids.

An env's :data:`~agentenvs.envs.types.StopCondition` mixes both kinds; every sampler
(vLLM and SGLang over HTTP, Hugging Face, verl's server manager) sends them as two
separate fields. One function does the split so the samplers cannot drift apart:
``bool`` is a subclass of ``int`` in Python, but ``True`` is not a token id, so a
boolean in the list is neither a string nor an id and is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StopSplit:
    """The stop strings and the stop token ids of one stop condition, in their order."""

    strings: list[str] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)

    def request_fields(self) -> dict[str, Any]:
        """``stop`` and ``stop_token_ids`` as vLLM, SGLang and verl's server take them.

        An empty kind is left out rather than sent as ``[]``: the servers' defaults apply.
        """
        fields: dict[str, Any] = {}
        if self.strings:
            fields["stop"] = list(self.strings)
        if self.ids:
            fields["stop_token_ids"] = list(self.ids)
        return fields


def split_stop(stop: Iterable[object]) -> StopSplit:
    """The strings and the token ids (``int`` but not ``bool``) of ``stop``, order kept."""
    strings: list[str] = []
    ids: list[int] = []
    for item in stop:
        if isinstance(item, str):
            strings.append(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            ids.append(item)
    return StopSplit(strings, ids)
