"""A driver-side weight sync against the suite's vLLM server, and the stamps it leaves on turns."""

from __future__ import annotations

import asyncio
import contextlib

from agentenvs.rollout.collect.executors import PolicySpec
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.weights.probe import Probe
from agentenvs.rollout.weights.sync import WeightSync
from support.ray_cluster import in_module_loop, two_node_cluster  # noqa: F401
from support.vllm_server import restore_base_weights, vllm_server  # noqa: F401  (the session fixture)


@contextlib.asynccontextmanager
async def driver_sync(server, tokenizer, **overrides):
    """The driver's policy on the suite's vLLM, its WeightSync, and the spec actors
    build their clients from; the server's base weights are put back after."""
    options = {"url": server.url, "tokenizer": tokenizer, "seed": 11,
               "weights_version": 0, "max_tokens": 12, **overrides}  # fmt: skip
    policy = OpenAICompatPolicy(**options)
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))
    try:
        yield sync, PolicySpec("openai", options)
    finally:
        await sync.unload_adapters()
        await policy.aclose()
        await asyncio.to_thread(restore_base_weights, server)  # it runs its own loop


def _turns(records) -> list:
    return [
        tr for record in records for traj in record.group.trajectories for tr in traj.transitions
    ]


def _max_diff(reference, turn) -> float:
    expected = reference(turn.ob + turn.ac.tokens, len(turn.ob))
    return max(abs(a - b) for a, b in zip(expected, turn.ac.logprobs, strict=True))
