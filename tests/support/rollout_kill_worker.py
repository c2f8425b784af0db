"""Runs a slowed-down guess_number collection into a store; the kill test SIGKILLs it.

Usage: python rollout_kill_worker.py OUT.jsonl GROUPS
"""

from __future__ import annotations

import asyncio
import sys

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.tokenizer import train_chatml_tokenizer

GROUP_SIZE = 2


class SlowScripted:
    """The scripted oracle, pausing before each action like a real sampler would."""

    per_env = True

    def __init__(self, delay: float) -> None:
        self.inner = make_policy("scripted")
        self.delay = delay

    def provenance(self):
        """The oracle's: a pause does not change what is sampled, so a resume with
        the plain oracle continues the same run."""
        return self.inner.provenance()

    def __call__(self, env):
        policy = self.inner(env)

        async def act(observation, stop, *, max_tokens=None):
            await asyncio.sleep(self.delay)
            return await policy(observation, stop, max_tokens=max_tokens)

        return act


def builders(groups: int):
    config = GuessNumberConfig(tasks=groups)
    return list(config.dataset(train_chatml_tokenizer(), group_size=GROUP_SIZE).builders)


def main() -> None:
    out, groups = sys.argv[1], int(sys.argv[2])
    delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.02
    asyncio.run(
        collect(
            builders(groups),
            SlowScripted(delay),
            CollectOptions(concurrency=2, progress=False),
            store=TrajectoryStore(out),
        )
    )


if __name__ == "__main__":
    main()
