"""Collecting small runs on a real vocabulary into a trajectory store, for the checks."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from agentenvs.envs import make
from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.collector import CollectOptions, ProvenanceNotes, collect
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import make_policy


class NoisyLogprobs:
    """A policy factory wrapping another one with made-up negative logprobs, so that
    logprob checks have real values to look at (the scripted policy has none)."""

    per_env = True

    def __init__(self, inner: Any, seed: int = 0) -> None:
        self.inner = inner
        self.rng = random.Random(seed)

    def __call__(self, env: Any) -> Any:
        policy = self.inner(env) if getattr(self.inner, "per_env", False) else self.inner

        async def noisy(observation, stop, *, max_tokens=None):
            out = await policy(observation, stop, max_tokens=max_tokens)
            logprobs = [-self.rng.uniform(0.01, 3.0) for _ in out.tokens]
            return TokensWithLogprobs(out.tokens, logprobs, out.stop_reason)

        return noisy


def collect_store(
    tokenizer: Any,
    env: str,
    path: Path,
    *,
    overrides: dict[str, Any] | None = None,
    policy: Any = None,
    groups: int = 1,
    group_size: int = 2,
) -> Path:
    """``groups`` groups of ``env`` with ``policy`` (scripted oracle by default)."""
    config = make(env, **(overrides or {}))
    dataset = config.dataset(tokenizer, group_size=group_size, n_groups=groups)
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    chosen = policy if policy is not None else make_policy("scripted")
    chosen.weights_version = 0  # a VersionedPolicy: every record names the version it sampled
    result = asyncio.run(
        collect(
            builders,
            chosen,
            CollectOptions(concurrency=2, retries=0, progress=False),
            store=TrajectoryStore(path),
            notes=ProvenanceNotes(policy_name="test"),
        )
    )
    if result.failed:
        raise AssertionError(f"groups failed: {[r.error for r in result.failed]}")
    return path
