"""Weight sync for OpenAI-compatible engines, with proof that the swap took.

Answers "does the next rollout use the updated weights?" from the data: a sync
pushes new weights to the engine (a LoRA adapter or a full reload), resets its
prefix cache, checks the engine's logprobs on fixed probes against the trainer's
own forward pass and against the server's own answers under every other weights
it could be serving (:mod:`.proof`), and only then moves the policy to the new
:class:`WeightsIdentity`, which every later turn records. The proof is kept only
while the server cannot have changed under it, and re-probed with its own
fingerprint when it may have (:mod:`.custody`, :mod:`.reprobe`); every training
batch is checked against the trainer's own logprobs, token by token under each
token's version (:mod:`.drift`).
"""

from agentenvs.envs.weights_identity import WeightsIdentity, hash_weights
from agentenvs.rollout.weights.gate import SwapGate

__all__ = ["SwapGate", "WeightsIdentity", "hash_weights"]
