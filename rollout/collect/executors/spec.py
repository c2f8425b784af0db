"""A policy described rather than held: built again wherever episodes run.

A network-client policy (the OpenAI-compatible client of a vLLM or SGLang
server) holds connection pools and an event loop's semaphores; shipping it to
another process would be wrong or impossible. Its name and options, by
contrast, pickle, and each Ray actor builds its own client from them, so every
actor talks to the servers directly and the driver carries no sampling traffic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentenvs.rollout.policies.base import Policy, PolicyFactory


@dataclass(frozen=True)
class PolicySpec:
    """``make_policy(name, **options)``, to be called where the episodes run."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def own_tokenizer(self) -> str | None:
        """The tokenizer that comes with the policy: a local ``hf`` model's directory
        (it must render as the model was trained); None for every other policy."""
        model = self.options.get("model")
        if self.name == "hf" and isinstance(model, str):
            return model
        return None

    def build(self) -> Policy | PolicyFactory:
        from agentenvs.rollout.policies import make_policy

        return make_policy(self.name, **dict(self.options))
