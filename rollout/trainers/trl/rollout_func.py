"""Multi-turn agentenvs rollouts inside TRL's ``GRPOTrainer`` (TRL >= 1.0).

TRL's ``GRPOTrainer(rollout_func=...)`` hook hands a custom function the prompts
of a generation batch and takes back, per prompt, ``prompt_ids``,
``completion_ids`` and ``logprobs``; any other key is forwarded to the reward
functions, except ``env_mask``, which the trainer multiplies into its loss mask
(1 = the model's token, 0 = an environment token). :func:`make_rollout_func`
builds that function for any registered environment:

* the dataset's ``prompt`` column names tasks (``"agentenvs:<split>:<index>"``,
  made by :func:`task_dataset`); TRL's sampler repeats each prompt
  ``num_generations`` times and consecutive repeats become one agentenvs group;
* the episodes run through the agentenvs collector, multi-turn, sampling with the
  model being trained (token by token with the trainer's own weights; pass
  ``policy=`` for a vLLM/SGLang server instead);
* each trajectory becomes one (prompt, completion) pair: the completion holds the
  sampled actions *and* the environment's observations in between, exactly as
  the model saw them, and ``env_mask`` is 0 on the observation tokens, so they
  never receive gradient;
* ``env_reward`` (the trajectory's total reward) is forwarded for
  :func:`env_reward`, the reward function to pass as ``reward_funcs``;
* ``weights_version`` is the version that sampled the trajectory: the oldest one
  its turns were stamped with by a policy that stamps (a vLLM policy kept in sync
  by :class:`~agentenvs.rollout.trainers.trl.weight_sync.VLLMWeightSyncCallback`),
  else the trainer's step; ``weights`` is the stamped label (``lora:name@hash``),
  or ``None``.

Keep ``mask_truncated_completions=False`` (TRL's default): TRL calls a
completion that does not end in EOS "truncated", but an agentenvs turn may end
on a stop string (``</search>``), and the environment already recorded why
each episode ended (``env_stop_reason``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.renderers import Tokenizer
from agentenvs.envs.types import Trajectory
from agentenvs.rollout.collect.options import CollectOptions
from agentenvs.rollout.policies.base import Policy, PolicyFactory
from agentenvs.rollout.trainers.common import one_sample, run_sync, warn_no_logprobs
from agentenvs.rollout.weights.drift import DriftAlarm, DriftLog, measure_drift, rows_from_records
from agentenvs.rollout.weights.proof import Tolerance
from agentenvs.rollout.weights.stamps import SampledBy

if TYPE_CHECKING:
    import datasets
    from trl import GRPOConfig

TASK_PREFIX = "agentenvs"


class TrainerTokenizer(Tokenizer, Protocol):
    """The trainer's ``processing_class``: a tokenizer the envs render with, whose
    padding id fills an empty completion."""

    pad_token_id: int | None


def task_key(split: str, index: int) -> str:
    """The ``prompt`` value that names task ``index`` of ``split``."""
    return f"{TASK_PREFIX}:{split}:{index}"


def parse_task_key(prompt: Any) -> tuple[str, int]:
    if isinstance(prompt, str):
        prefix, _, rest = prompt.partition(":")
        split, _, index = rest.rpartition(":")
        if prefix == TASK_PREFIX and split and index.isdigit():
            return split, int(index)
    raise ValueError(
        f"prompt {prompt!r} does not name an agentenvs task; build the dataset with "
        "agentenvs.rollout.trainers.trl.rollout_func.task_dataset() (prompts like 'agentenvs:train:3')"
    )


def task_dataset(
    config: EnvConfig, *, split: str = "train", n: int | None = None
) -> datasets.Dataset:
    """A ``datasets.Dataset`` whose ``prompt`` column names the split's tasks (all, or
    the first ``n``, wrapping around). The environment renders the real prompt."""
    from datasets import Dataset

    total = config.num_tasks(split)
    if total <= 0:
        raise ValueError(f"environment {config.env_name!r} has no tasks in split {split!r}")
    count = total if n is None else n
    return Dataset.from_dict({"prompt": [task_key(split, i % total) for i in range(count)]})


def env_reward(prompts: list, completions: list, env_reward: list[float], **_: Any) -> list[float]:
    """TRL reward function: the environment's total reward of each rollout."""
    return [float(r) for r in env_reward]


class TrainerModelPolicy:
    """Samples with the model the trainer is training (an :class:`HFPolicy` over it).

    Generation switches the model to eval mode; :func:`make_rollout_func` restores
    the mode afterwards (TRL reads ``model.training`` to tell train from eval).
    """

    per_env = False

    def __init__(self, trainer: Any, tokenizer: Tokenizer, *, max_tokens: int, seed: int | None):
        from agentenvs.rollout.policies.hf import HFPolicy

        model = trainer.accelerator.unwrap_model(trainer.model)
        args: GRPOConfig = trainer.args
        self.model = model
        self.policy = HFPolicy(
            model,
            tokenizer,
            temperature=float(args.temperature),
            top_p=float(args.top_p),
            max_tokens=max_tokens,
            seed=seed,
            device=str(trainer.accelerator.device),
        )
        self.weights_version = int(trainer.state.global_step)

    async def __call__(self, observation, stop, *, max_tokens=None):
        return await self.policy(observation, stop, max_tokens=max_tokens)

    def provenance(self) -> dict[str, Any]:
        return {**self.policy.provenance(), "policy": "trl-trainer-model"}


def make_rollout_func(
    config: EnvConfig,
    tokenizer: TrainerTokenizer,
    *,
    policy: Policy | PolicyFactory | TrainerPolicyFactory | None = None,
    max_tokens: int = 256,
    options: CollectOptions | None = None,
    seed: int | None = 0,
    store: str | Path | None = None,
    drift: str | Path | None = None,
    drift_tolerance: Tolerance | None = None,
) -> Callable[[list, Any], dict[str, list]]:
    """A ``rollout_func`` for ``GRPOTrainer`` over ``config``'s environment.

    ``tokenizer`` must be the trainer's ``processing_class`` (the environment
    renders with it). ``policy`` is ``None`` (sample with the trainer's model),
    an agentenvs policy, or a function of the trainer returning one, marked with
    :func:`trainer_policy_factory` (called each generation batch, e.g. to point at
    a vLLM server with fresh weights).
    ``max_tokens`` caps one action (the environment's own cap applies too).
    ``options`` are the collector's (concurrency, retries, group timeout; its
    progress bar is off).
    ``store`` appends every group to a trajectory file that ``agentenvs view`` reads.

    A group that still fails after its retries stops training with its error:
    TRL needs a completion for every prompt.

    ``drift`` (a JSONL path) turns on the drift alarm: every batch is scored by the
    trainer's model, one forward pass per turn, and the tokens stamped with the
    trainer's step (the version a synced server claims to serve) are compared with
    the sampler's logprobs (:mod:`agentenvs.rollout.weights.drift`, the fp32
    tolerance unless ``drift_tolerance``). Each report is appended there; an alarm
    stops training with :class:`~agentenvs.rollout.weights.drift.DriftAlarm` before
    TRL trains on the batch.
    """
    from agentenvs.rollout.collect.collector import collect
    from agentenvs.rollout.collect.store import TrajectoryStore
    from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy

    options = replace(options or CollectOptions(), progress=False)
    trajectory_store = TrajectoryStore(store) if store is not None else None
    drift_log = DriftLog(drift) if drift is not None else None
    calls = 0

    def rollout_func(prompts: list, trainer: Any) -> dict[str, list]:
        nonlocal calls
        calls += 1
        runs = _consecutive_runs([parse_task_key(p) for p in prompts], _group_size(trainer))
        builders = [
            config.group_builder(index, count, tokenizer, split) for (split, index), count in runs
        ]
        step = int(trainer.state.global_step)
        keys = [f"step{step}:call{calls}:{i}:{b.task_id}" for i, b in enumerate(builders)]
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        try:
            sampler = _resolve_policy(policy, trainer, tokenizer, max_tokens, seed, step)

            async def run():
                # A server policy learns its model's name on its first request; ask
                # first, so the store's run identity names it from the first batch
                # on (else the second batch looks like another run and is refused).
                if isinstance(sampler, OpenAICompatPolicy):
                    await sampler.model_name()
                return await collect(builders, sampler, options, store=trajectory_store, keys=keys)

            result = run_sync(run())
        finally:
            model.train(was_training)
        if result.failed:
            raise RuntimeError(
                f"{len(result.failed)} agentenvs group(s) failed; first: {result.failed[0].error}"
            )
        by_key = {record.key: record for record in result.records}
        if drift_log is not None:
            _check_drift(drift_log, result.ok, model, step, drift_tolerance)
        return _as_trl_batch([by_key[key].group for key in keys], tokenizer, weights_version=step)

    return rollout_func


def _check_drift(log: DriftLog, records: list, model: Any, step: int, tolerance) -> None:
    from agentenvs.rollout.weights.probe import torch_reference

    rows = rows_from_records(records, torch_reference(model))
    report = measure_drift(
        rows,
        trainer_version=step,
        tolerance=tolerance or Tolerance.for_dtype("float32"),
        step=step,
    )
    log.append(report)
    if report.alarm:
        raise DriftAlarm(f"step {step}: {report.alarm}")


def _consecutive_runs(
    tasks: Sequence[tuple[str, int]], group_size: int | None = None
) -> list[tuple[tuple[str, int], int]]:
    """``[a, a, b, b, a]`` -> ``[(a, 2), (b, 2), (a, 1)]``: TRL repeats each prompt
    ``num_generations`` times in a row; each run is one GRPO group. A run longer
    than ``group_size`` (the sampler drew the same task twice in a row) is cut into
    groups of that size, so every group matches the one TRL computes advantages over."""
    runs: list[tuple[tuple[str, int], int]] = []
    for task in tasks:
        if runs and runs[-1][0] == task and (group_size is None or runs[-1][1] < group_size):
            runs[-1] = (task, runs[-1][1] + 1)
        else:
            runs.append((task, 1))
    return runs


def _group_size(trainer: Any) -> int | None:
    """The ``num_generations`` of the trainer's config for the current mode
    (``GRPOConfig.num_generations_eval`` in eval, when set)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    args: GRPOConfig = trainer.args
    size = None if model.training else args.num_generations_eval
    size = size or args.num_generations
    return int(size) if isinstance(size, int) and size > 0 else None


def _resolve_policy(policy, trainer, tokenizer, max_tokens, seed, step):
    if policy is None:
        return TrainerModelPolicy(
            trainer, tokenizer, max_tokens=max_tokens, seed=None if seed is None else seed + step
        )
    if isinstance(policy, TrainerPolicyFactory):
        return policy.make(trainer)
    return policy


@dataclass(frozen=True)
class TrainerPolicyFactory:
    """``make(trainer) -> policy``, called each generation batch (plain policies are
    callables too, so a factory is told apart by this type)."""

    make: Callable[[Any], Policy | PolicyFactory]


def trainer_policy_factory(func: Callable[[Any], Policy | PolicyFactory]) -> TrainerPolicyFactory:
    """Mark ``func(trainer) -> policy`` as a factory for :func:`make_rollout_func`."""
    return TrainerPolicyFactory(func)


def _as_trl_batch(
    groups: list, tokenizer: TrainerTokenizer, *, weights_version: int
) -> dict[str, list]:
    """Trajectories as TRL's rollout output, one entry per trajectory in prompt order."""
    batch: dict[str, list] = {
        key: []
        for key in (
            "prompt_ids",
            "completion_ids",
            "logprobs",
            "env_mask",
            "env_reward",
            "env_stop_reason",
            "env_turns",
            "env_dropped_samples",
            "weights_version",
            "weights",
            "env_token_versions",
        )
    }
    pad = tokenizer.pad_token_id
    bare = 0
    for group in groups:
        for traj, reward in zip(group.trajectories, group.total_rewards(), strict=True):
            sample, dropped = one_sample(traj)
            bare += not sample.has_logprobs
            p = sample.prompt_length
            completion = sample.tokens[p:]
            mask = sample.loss_mask[p:]
            logprobs = sample.logprobs[p:]
            if not completion:
                # No sampled token at all (the env ended before the first action
                # produced one). TRL indexes the last completion token, so a single
                # padding token stands in, masked out of the loss.
                completion, mask, logprobs = [pad if pad is not None else 0], [0], [0.0]
            batch["prompt_ids"].append(sample.tokens[:p])
            batch["completion_ids"].append(completion)
            batch["logprobs"].append(logprobs)
            batch["env_mask"].append(mask)
            # Per completion token, the weights version that sampled it (None on
            # observation tokens, and everywhere when the policy does not stamp turns).
            versions = sample.token_versions[p:] if sample.token_versions else []
            batch["env_token_versions"].append(versions or [None] * len(completion))
            batch["env_reward"].append(float(reward))
            batch["env_stop_reason"].append(traj.stop_reason or "unknown")
            batch["env_turns"].append(len(traj.transitions))
            batch["env_dropped_samples"].append(dropped)
            version, label = _sampled_by(traj, weights_version)
            batch["weights_version"].append(version)
            batch["weights"].append(label)
    if bare:
        # TRL's vLLM importance-sampling correction reads ``logprobs`` as the sampler's.
        n = len(batch["prompt_ids"])
        warn_no_logprobs("rollout_func", f"{bare} of {n} rollouts have no sampler logprobs")
    return batch


def _sampled_by(traj: Trajectory, step: int) -> tuple[Any, str | None]:
    """The (version, label) of the weights that sampled ``traj``: its oldest stamped
    turn's (as a collected group records it), or ``(step, None)`` when its policy
    does not stamp turns."""
    sampled = SampledBy.of_trajectory(traj)
    if sampled.version is None:
        return step, None
    return sampled.version, sampled.label
