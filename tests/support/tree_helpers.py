"""Real policies for tree-rollout tests: each trajectory slot samples its own actions.

A tree's paths are told apart by their slot (``TurnSlot.traj_index``, one per path),
as a seeded sampler tells them apart; these policies draw from a generator seeded by
the slot, so branches diverge, reruns repeat, and the logprobs are the generator's
own probabilities (the entropy trigger reads them).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.policies.base import current_turn


@dataclass
class SeededGuesser:
    """guess_number actions: ``<guess>N</guess>`` with N uniform in [low, high]."""

    tokenizer: object
    low: int = 1
    high: int = 100
    seed: int = 0
    uncertain_turns: tuple[int, ...] = ()
    """Turns (from 1) whose actions get logprob log(1/range) per token; others -0.01."""

    async def __call__(self, ob, stop, *, max_tokens=None) -> TokensWithLogprobs:
        slot = current_turn.get()
        lane = slot.traj_index if slot else 0
        turn = slot.turn if slot else 0
        rng = random.Random(f"{self.seed}/{lane}/{turn}")
        guess = rng.randint(self.low, self.high)
        text = f"<guess>{guess}</guess>"
        tokens = list(self.tokenizer.encode(text, add_special_tokens=False))
        spread = -math.log(self.high - self.low + 1)
        value = spread if (turn + 1) in self.uncertain_turns else -0.01
        return TokensWithLogprobs(tokens, [value] * len(tokens), "stop")
