"""Synchronous GRPO on an agentenvs environment with PyTRIO's Tinker-like client.

One step is: sample groups with the current sampling client (multi-turn, through
the agentenvs collector) -> group-relative advantages -> PyTRIO datums ->
``forward_backward`` -> ``optim_step`` -> save the weights and get a sampling
client for them, bumping ``weights_version``. Every group is stored as JSON
lines with the weights version that sampled it, so ``agentenvs view`` shows what
each step trained on.

PyTRIO is a remote service that needs an account (``pip install pytrio``, then
``trio login``), so this script is documented and its step is tested against a
local stand-in of the sampling service, not run in CI::

    python examples/pytrio_grpo.py --env guess_number --base-model Qwen/Qwen3-4B \\
        --steps 20 --groups 16 --group-size 8 --out out/pytrio_guess.jsonl

    # Search-R1 against a retrieval server, environment keys as with `agentenvs rollout`:
    python examples/pytrio_grpo.py --env search_r1 --set retriever.kind=http \\
        --set retriever.url=http://127.0.0.1:8000/retrieve --base-model Qwen/Qwen3-4B

The tokenizer is the base model's own (``trainer.get_tokenizer()``), so the
environment renders exactly the tokens the sampler sees.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentenvs.envs.types import EnvGroupBuilder
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.data.advantages import compute_advantages, remove_constant_reward_groups
from agentenvs.rollout.data.samples import trajectories_to_samples
from agentenvs.rollout.trainers.pytrio.handoff import to_pytrio_datums
from agentenvs.rollout.trainers.pytrio.sampling_policy import PyTrioSamplingPolicy


@dataclass
class GRPOSettings:
    max_tokens: int = 512
    """Longest single action (the environment's own per-turn cap still applies)."""
    temperature: float = 1.0
    learning_rate: float = 1e-5
    loss_fn: str = "importance_sampling"
    """A PyTRIO policy loss reading target_tokens, logprobs and advantages (or "ppo")."""
    normalize_std: bool | None = None
    """None: GRPO's own rule (divide by the group's std); False: centre only (Dr. GRPO)."""
    concurrency: int = 16
    """Groups sampled at once."""


@dataclass
class StepStats:
    weights_version: int
    """The weights that sampled this step's groups."""
    groups: int
    failed_groups: int
    trained_groups: int
    """Groups with different rewards (constant-reward groups have zero advantage)."""
    datums: int
    mean_reward: float
    loss_metrics: dict[str, float]


async def grpo_step(
    trainer: Any,
    sampler: Any,
    builders: Sequence[EnvGroupBuilder],
    *,
    weights_version: int,
    settings: GRPOSettings,
    eos_token_ids: Sequence[int] = (),
    store: TrajectoryStore | None = None,
    step: int = 0,
) -> tuple[StepStats, Any]:
    """One synchronous GRPO step; returns its stats and the sampling client for the
    updated weights (whose version is ``weights_version + 1``)."""
    from pytrio import AdamParams

    policy = PyTrioSamplingPolicy(
        sampler,
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
        eos_token_ids=eos_token_ids,
        weights_version=weights_version,
    )
    # 1. Sample: every group of the batch, multi-turn, token-in/token-out.
    result = await collect(
        builders,
        policy,
        CollectOptions(concurrency=settings.concurrency, progress=False),
        store=store,
        # The step in the key: one store serves every step, and the default keys
        # ("<position>:<task id>") repeat when the dataset wraps; a repeated key is
        # taken as already collected (resume) and the step would collect nothing.
        keys=[f"step{step}:{i}:{getattr(b, 'task_id', i)}" for i, b in enumerate(builders)],
    )
    groups = [record.group for record in result.ok if record.group is not None]
    rewards = [r for group in groups for r in group.total_rewards()]

    # 2. Advantages over each group's total rewards; constant groups teach nothing.
    trained = remove_constant_reward_groups(groups)
    datums = []
    loss_metrics: dict[str, float] = {}
    if trained:
        advantages = compute_advantages(trained, "grpo", normalize_std=settings.normalize_std)
        # 3. Training samples -> PyTRIO datums (one-token shift, observations advantage 0).
        datums = to_pytrio_datums(trajectories_to_samples(trained, advantages))
        # 4. One policy-gradient update on the remote trainer.
        backward = await trainer.forward_backward_async(datums, loss_fn=settings.loss_fn)
        output = await backward
        loss_metrics = {k: float(v) for k, v in (getattr(output, "metrics", None) or {}).items()}
        optimized = await trainer.optim_step_async(AdamParams(learning_rate=settings.learning_rate))
        await optimized
    # 5. New weights -> a sampling client for them: the next step is on-policy.
    new_sampler = await trainer.save_weights_and_get_sampling_client_async()
    stats = StepStats(
        weights_version=weights_version,
        groups=len(result.records),
        failed_groups=len(result.failed),
        trained_groups=len(trained),
        datums=len(datums),
        mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
        loss_metrics=loss_metrics,
    )
    return stats, new_sampler


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="guess_number", help="a registered environment")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--base-model", required=True)
    parser.add_argument("--lora-rank", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--groups", type=int, default=8, help="groups (tasks) per step")
    parser.add_argument("--group-size", type=int, default=8, help="GRPO's G")
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--loss-fn", default="importance_sampling")
    parser.add_argument("--out", type=Path, default=Path("out/pytrio_grpo.jsonl"))
    return parser.parse_args(argv)


async def main(argv: Sequence[str] | None = None) -> None:
    import pytrio

    from agentenvs.envs.registry import make
    from agentenvs.rollout.cli import parse_assignments

    args = parse_args(argv)
    config = make(args.env, **parse_assignments(args.sets, "--set"))
    service = pytrio.ServiceClient()
    trainer = await service.create_lora_training_client_async(
        base_model=args.base_model, rank=args.lora_rank
    )
    tokenizer = trainer.get_tokenizer()
    eos = getattr(tokenizer, "eos_token_id", None)
    sampler = await trainer.save_weights_and_get_sampling_client_async()
    settings = GRPOSettings(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        learning_rate=args.learning_rate,
        loss_fn=args.loss_fn,
    )
    dataset = config.dataset(tokenizer, group_size=args.group_size, batch_size=args.groups)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    store = TrajectoryStore(args.out)
    for step in range(args.steps):
        builders = dataset.get_batch(step % len(dataset))
        stats, sampler = await grpo_step(
            trainer,
            sampler,
            builders,
            weights_version=step,
            settings=settings,
            eos_token_ids=[eos] if isinstance(eos, int) else [],
            store=store,
            step=step,
        )
        print(json.dumps({"step": step, **asdict(stats)}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
