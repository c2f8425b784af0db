"""Multimodal runs for the image tests: the tiny Qwen2-VL, the charts env, stores made once.

The tiny VLM (``rollout/policies/vision_tiny_model.py``) is saved once per test
session over the real Qwen2.5 vocabulary (``support/vocab``), and the charts
environment is collected through it. :class:`ForcedOracle` plays the env's oracle
actions but scores every one with the model (teacher forcing through the vision
sampler's own prefill), so a store holds tool images from several turns *and* the
model's exact logprobs and ``policy/images`` stamps: what a trained model calling
the zoom tool would produce. A random model alone never writes a well-formed call.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
from pathlib import Path
from typing import Any

from agentenvs.envs import make
from agentenvs.envs.types import ImageObservation, observation_images
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.policies.base import StampedTokens
from agentenvs.rollout.policies.hf import HFPolicy
from agentenvs.rollout.policies.vision_tiny_model import SMALL_IMAGES, save_tiny_vlm
from support.vocab import shared_vocabulary

PAD = 151655
"""``<|image_pad|>`` in the Qwen2.5 vocabulary."""


@functools.cache
def tiny_vlm_dir() -> Path:
    """The tiny VLM saved (weights and image processor settings) once per session."""
    root = Path(tempfile.mkdtemp(prefix="agentenvs-tiny-vlm-"))
    return save_tiny_vlm(root / "model", shared_vocabulary("qwen2.5"), with_tokenizer=False)


@functools.cache
def tiny_vlm_policy(seed: int = 0) -> HFPolicy:
    """``make_policy("hf")`` over the saved tiny VLM (the Qwen2.5 tokenizer object passed in)."""
    return make_policy(
        "hf", model=str(tiny_vlm_dir()), tokenizer=shared_vocabulary("qwen2.5"), seed=seed
    )


def charts_config(**overrides: Any) -> Any:
    """Charts with the tiny VLM's image processor and short episodes."""
    settings = {"image_processor": SMALL_IMAGES.key(), "limits": {"max_turns": 4}, **overrides}
    return make("charts", **settings)


class ForcedOracle:
    """The env's oracle actions with the model's own logprobs (see the module docstring)."""

    per_env = True

    def __init__(self, policy: HFPolicy) -> None:
        self.policy = policy
        self.oracle = make_policy("scripted")

    def __call__(self, env: Any) -> Any:
        oracle = self.oracle(env)
        sampler = self.policy.sampler

        class Forced:
            def sees_images(self) -> bool:
                return True

            async def __call__(self, ob, stop, *, max_tokens=None):
                import torch

                out = await oracle(ob, stop, max_tokens=max_tokens)
                seq = ImageObservation(list(ob) + list(out.tokens), observation_images(ob))

                def score() -> tuple[list[float], dict]:
                    with sampler._lock, torch.inference_mode():
                        logits = sampler._prefill(seq, torch.tensor([list(seq)])).logits[0]
                        logprobs = torch.log_softmax(logits.float(), -1)
                        n = len(ob)
                        values = [float(logprobs[n - 1 + i, t]) for i, t in enumerate(out.tokens)]
                        return values, dict(sampler._stamp)

                values, stamp = await asyncio.to_thread(score)
                return StampedTokens(list(out.tokens), values, out.stop_reason, stamp=stamp)

        return Forced()


def collect_charts(
    policy: Any, store: Path, *, groups: int = 2, group_size: int = 2, **overrides: Any
) -> Any:
    """Collect charts groups into ``store`` (fresh) with the Qwen2.5 vocabulary."""
    tokenizer = shared_vocabulary("qwen2.5")
    dataset = charts_config(**overrides).dataset(tokenizer, group_size=group_size, n_groups=groups)
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    store.unlink(missing_ok=True)
    return asyncio.run(
        collect(builders, policy, CollectOptions(concurrency=2, retries=0),
                store=TrajectoryStore(store))
    )  # fmt: skip


class ModelTurns:
    """Turns listed in ``model_turns`` are sampled by ``model``; the others are the env's
    oracle (no logprobs). With a random model, this is how an engine-sampled turn sees
    a tool's picture: the oracle's zoom call came first."""

    per_env = True

    def __init__(self, model: Any, model_turns: tuple[int, ...] = (1,)) -> None:
        self.model = model
        self.model_turns = set(model_turns)
        self.oracle = make_policy("scripted")

    def __call__(self, env: Any) -> Any:
        oracle, model, turns, seen = self.oracle(env), self.model, self.model_turns, [0]

        class Mixed:
            def sees_images(self) -> bool:
                return True

            async def __call__(self, ob, stop, *, max_tokens=None):
                turn, seen[0] = seen[0], seen[0] + 1
                inner = model if turn in turns else oracle
                return await inner(ob, stop, max_tokens=max_tokens)

        return Mixed()
