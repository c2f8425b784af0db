"""Weight sync for OpenAI-compatible engines, with proof that the swap took.

Answers "does the next rollout use the updated weights?" from the data: a sync
pushes new weights to the engine (a LoRA adapter or a full reload), resets its
prefix cache, checks the engine's logprobs on a fixed probe against the
trainer's own forward pass, and only then moves the policy to the new
:class:`WeightsIdentity`, which every later turn records.
"""

from agentenvs.rollout.weights.gate import SwapGate
from agentenvs.rollout.weights.identity import WeightsIdentity, hash_weights

__all__ = ["SwapGate", "WeightsIdentity", "hash_weights"]
