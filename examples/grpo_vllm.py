"""Asynchronous GRPO with vLLM serving the policy and every weight update proven.

The loop, all on CPU with a tiny model:

* vLLM (from ``.venv-vllm``, started here unless ``--url`` names a running one)
  serves the policy; agentenvs streams finished guess_number groups from it
  (:class:`StreamingCollection`) while later groups still roll out;
* torch trains on each batch of ``--groups`` handed-over groups in a worker thread
  (the clipped GRPO loss of ``grpo_torch.py``, masked to sampled tokens); with
  ``--sync lora`` only a peft LoRA adapter trains, with ``--sync full`` every weight;
* after each step the new weights are pushed (``load_lora_adapter`` under a new
  name, or an in-place ``reload_weights``), the prefix cache is reset, and the
  server's teacher-forced logprobs on fixed probes are checked against the trainer's
  own forward pass of the new weights and against what the server served before,
  before ``weights_version`` moves on (``verified``: measurably the new weights;
  ``indistinguishable``: an update too small to tell apart). A mismatch stops the run;
* a group whose oldest turn is more than ``--max-staleness`` versions behind the
  trainer is re-queued, never trained on. Every stored turn records its seed, its
  weights version and what was loaded (adapter name or weights path + hash).

Before RL the model is behaviour-cloned for a few steps on the environment's
scripted oracle (as in ``grpo_torch.py``) so the episodes of a group differ in
reward. Its last output line is one JSON object: ``steps``, ``sync``,
``verified_syncs`` and ``indistinguishable_syncs``, ``reward_first`` and
``reward_last`` (the mean reward over every task with the starting and the final
weights, the same seeded requests both times; ``eval_first``/``eval_last`` pair
them episode by episode; ``rewards`` has each step's training batch), ``consumed``
(each trained group's key, step and the version it was trained on),
``max_staleness_seen``, ``store``, and more::

    python examples/grpo_vllm.py --steps 8 --sync lora --out out/grpo-vllm
    agentenvs check out/grpo-vllm/trajectories.jsonl --tokenizer out/grpo-vllm/model \\
        --current-version 8 --max-staleness 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_torch import DEMO_GUESS_CONFIG, forward_logits, grpo_loss, response_logprobs, warm_start

from agentenvs.envs.registry import make
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.collect.streaming import Staleness, StreamingCollection
from agentenvs.rollout.data.advantages import compute_advantages
from agentenvs.rollout.data.samples import trajectories_to_samples
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.trainers.verl.drift import batch_drift
from agentenvs.rollout.trainers.verl.handoff import to_verl_batch
from agentenvs.rollout.weights.drift import DriftAlarm, DriftLog, DriftReport
from agentenvs.rollout.weights.probe import Probe, torch_reference
from agentenvs.rollout.weights.sync import WeightSync

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class Trainer:
    """The model being trained, its optimizer, and how it saves what the server loads."""

    model: Any
    optimizer: Any
    sync_path: str
    checkpoints: Path
    clip_eps: float = 0.2
    pad_token_id: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    keep_versions: int = 2
    """How many past versions' trainable weights are kept, to score the groups they
    sampled (an asynchronous loop trains on groups up to ``--max-staleness`` behind)."""
    snapshots: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)

    def step(
        self, records: Sequence[GroupRecord], version: int | None
    ) -> tuple[dict[str, Any], DriftReport]:
        """One GRPO update on the handed-over groups (runs in a worker thread).

        Before the update, the trainer's logprobs of the sampled tokens are compared
        with the sampler's, each group under the weights of the version it is stamped
        with (the current ones from the loss's own forward pass, older kept ones by one
        more pass each): they must agree, else the sampler did not run the weights it
        claims and the step refuses the batch (:class:`DriftAlarm`)."""
        groups = [r.group for r in records if r.group is not None]
        samples = trajectories_to_samples(groups, compute_advantages(groups, "grpo"))
        batch = to_verl_batch(samples, self.pad_token_id)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        logits = forward_logits(self.model, batch)
        with torch.no_grad():
            ours = {version: response_logprobs(logits, batch)}
            stamped = {v for r in records for v in r.sampled_by().versions}
            for old in stamped & set(self.snapshots) - {version}:
                ours[old] = self._logprobs_under(self.snapshots[old], batch)
        drift = batch_drift(batch, ours, records, trainer_version=version, step=len(self.history))
        if drift.alarm:
            return {"refused": drift.alarm}, drift
        loss, stats = grpo_loss(logits, batch, self.clip_eps)
        if not math.isfinite(stats["loss"]):
            raise FloatingPointError(f"the loss is {stats['loss']}")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        if version is not None:  # the weights of `version`, before they move on
            self.snapshots[version] = self._trainable_copy()
            for stale in sorted(self.snapshots)[: -self.keep_versions]:
                del self.snapshots[stale]
        self.optimizer.step()
        self.model.eval()
        self.history.append(stats)
        return stats, drift

    def _trainable_copy(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad}

    def _logprobs_under(self, weights: dict[str, torch.Tensor], batch: dict) -> torch.Tensor:
        """The batch's response logprobs under kept weights (then the current ones back)."""
        params = dict(self.model.named_parameters())
        current = self._trainable_copy()
        try:
            for name, value in weights.items():
                params[name].data.copy_(value)
            return response_logprobs(forward_logits(self.model, batch), batch)
        finally:
            for name, value in current.items():
                params[name].data.copy_(value)

    def save(self, version: int) -> Path:
        """What the server loads: the adapter (lora) or the whole checkpoint (full)."""
        directory = self.checkpoints / f"{self.sync_path}-v{version}"
        self.model.save_pretrained(directory)
        return directory


def prepare_model(out: Path, tokenizer: Any, config: Any, warmup_steps: int, seed: int) -> Path:
    """The tiny vLLM-sized model, behaviour-cloned on the oracle, saved for the server."""
    from agentenvs.rollout.policies.tiny_model import VLLM_HIDDEN_SIZE, build_tiny_model

    model = build_tiny_model(tokenizer, hidden_size=VLLM_HIDDEN_SIZE, seed=seed)
    warm_start(model, tokenizer, config, steps=warmup_steps)
    directory = out / "model"
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def make_trainer(model_dir: Path, sync_path: str, out: Path, learning_rate: float) -> Trainer:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if sync_path == "lora":
        import peft

        config = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=LORA_TARGETS)
        model = peft.get_peft_model(model, config)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learning_rate)
    model.eval()
    return Trainer(model, optimizer, sync_path, out / "checkpoints")


def _drift_stats(drift: DriftReport) -> dict[str, Any]:
    """The on-policy tokens' drift, for the step's line."""
    on = [v for v in drift.versions if v.on_policy]
    return {
        "drift_tokens": sum(v.tokens for v in on),
        "drift_rms": max((v.rms for v in on), default=0.0),
        "drift_max": max((v.max_abs for v in on), default=0.0),
    }


async def evaluate(
    policy: OpenAICompatPolicy, config: Any, tokenizer: Any, size: int
) -> list[float]:
    """Each episode's reward over every task, ``size`` seeded episodes each, with the
    current weights: the same requests before and after training, so only the weights
    differ and the two lists pair episode by episode."""
    builders = [config.group_builder(i, size, tokenizer) for i in range(config.num_tasks())]
    keys = [f"eval:{i}" for i in range(len(builders))]
    result = await collect(
        builders, policy, CollectOptions(concurrency=len(builders), progress=False), keys=keys
    )
    rewards = [r for record in result.ok for r in record.group.total_rewards()]
    if result.failed or not rewards:
        raise RuntimeError(f"evaluation failed: {result.failed[0].error if result.failed else ''}")
    return rewards


async def run_loop(args: argparse.Namespace, url: str, model_dir: Path, tokenizer: Any) -> dict:
    """Push the starting weights (version 0, verified), then stream, train, sync."""
    config = make("guess_number", **DEMO_GUESS_CONFIG)
    dataset = config.dataset(tokenizer, group_size=args.group_size, batch_size=args.groups)
    builders = [
        b for i in range(args.steps + 1) for b in dataset.get_batch(i % len(dataset))
    ]  # one batch of slack: groups still in flight when the last step is done
    # One key per position in the whole stream, not per batch: the same task comes
    # back every len(dataset) batches, and a key the store already holds is taken as
    # collected (resume) and skipped, so per-batch keys would collect nothing then.
    keys = [f"{i}:{b.task_id}" for i, b in enumerate(builders)]
    policy = OpenAICompatPolicy(
        url, tokenizer=tokenizer, seed=args.seed, weights_version=0, max_tokens=32
    )
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))
    lr = args.learning_rate or (2e-3 if args.sync == "lora" else 1e-4)
    trainer = make_trainer(model_dir, args.sync, args.out, lr)
    trainer.keep_versions = args.max_staleness + 1
    trainer.pad_token_id = tokenizer.pad_token_id
    # Version 0: the server may have started from other weights of the same shape
    # (--url); a verified full reload makes it serve exactly the trainer's start.
    start = trainer.model.get_base_model() if args.sync == "lora" else trainer.model
    await sync.push_full(model_dir, torch_reference(start), version=0)
    eval_first = await evaluate(policy, config, tokenizer, args.group_size)
    store = TrajectoryStore(args.out / "trajectories.jsonl")
    drift_log = DriftLog(args.out / "drift.jsonl")
    stream = StreamingCollection(
        builders,
        policy,
        CollectOptions(concurrency=2 * args.groups),
        store=store,
        keys=keys,
        staleness=Staleness(max_staleness=args.max_staleness, on_stale="requeue", max_requeues=4),
    )
    rewards: list[float] = []
    syncs: list[dict[str, Any]] = []
    batch: list[GroupRecord] = []
    consumed: list[dict[str, Any]] = []
    step_started = time.perf_counter()
    async for record in stream:
        batch.append(record)
        if len(batch) < args.groups:
            continue
        step_rewards = [r for rec in batch for r in rec.group.total_rewards()]
        # Trained on version `trained_on`: staleness is judged against it (by the test,
        # from the records' own stamps).
        trained_on = policy.weights_version
        consumed += [
            {"key": rec.key, "step": len(rewards), "trained_on": trained_on} for rec in batch
        ]
        # Train in a thread: the event loop keeps collecting the next groups meanwhile.
        stats, drift = await asyncio.to_thread(trainer.step, batch, trained_on)
        drift_log.append(drift)
        if drift.alarm:
            raise DriftAlarm(f"step {len(rewards)}: {drift.alarm}")
        stats.update(_drift_stats(drift))
        version = sync.next_version()
        saved = trainer.save(version)
        reference = torch_reference(trainer.model)
        if args.sync == "lora":
            report = await sync.push_lora(saved, reference, version=version)
        else:
            report = await sync.push_full(saved, reference, version=version)
        rewards.append(sum(step_rewards) / len(step_rewards))
        now = time.perf_counter()
        syncs.append(
            {
                "step_s": now - step_started,
                "version": report.identity.version,
                "verified": report.identity.verified,
                "proof": report.identity.proof,
                "probe_power": report.identity.probe_power,
                "probe_max_abs_diff": report.probe.max_abs_diff,
                "load_s": report.load_s,
                "reset_s": report.reset_s,
                "verify_s": report.verify_s,
                "total_s": report.total_s,
            }
        )
        print(
            json.dumps(
                {"step": len(rewards) - 1, "mean_reward": rewards[-1], **stats, **syncs[-1]}
            ),
            flush=True,
        )
        batch, step_started = [], now
        if len(rewards) == args.steps:
            break
    eval_last = await evaluate(policy, config, tokenizer, args.group_size)
    await sync.unload_adapters()
    await policy.aclose()
    return {
        "steps": len(rewards),
        "sync": args.sync,
        "verified_syncs": sum(1 for s in syncs if s["proof"] == "verified"),
        "indistinguishable_syncs": sum(1 for s in syncs if s["proof"] == "indistinguishable"),
        "weights_version": policy.weights_version,
        "reward_first": sum(eval_first) / len(eval_first),
        "reward_last": sum(eval_last) / len(eval_last),
        "eval_first": eval_first,
        "eval_last": eval_last,
        "rewards": rewards,
        "consumed": consumed,
        "max_staleness": args.max_staleness,
        "max_staleness_seen": stream.stats.max_staleness_seen,
        "requeued_stale": stream.stats.requeued_stale,
        "dropped_stale": stream.stats.dropped_stale,
        "failed_groups": stream.stats.failed,
        "sync_seconds_mean": sum(s["total_s"] for s in syncs) / max(1, len(syncs)),
        "step_seconds_mean": sum(s["step_s"] for s in syncs) / max(1, len(syncs)),
        "store": str(store.path),
        "drift": str(drift_log.path),
        "model": str(model_dir),
        "url": url,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--groups", type=int, default=2, help="groups per training step")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--sync", choices=["lora", "full"], default="lora")
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("out/grpo-vllm"))
    parser.add_argument(
        "--url",
        help="a running vLLM server (dev mode, LoRA rank >= 8) serving a model of the tiny "
        "model's shape; the starting weights are pushed to it first",
    )
    parser.add_argument("--learning-rate", type=float, default=None)
    parser.add_argument("--warmup-steps", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.groups < 1 or args.group_size < 2:
        parser.error("need --steps >= 1, --groups >= 1 and --group-size >= 2")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    from agentenvs.rollout.policies.vllm_server import VLLMOptions, start_vllm
    from agentenvs.rollout.tokenizer import train_chatml_tokenizer

    args = parse_args(argv)
    # A SIGTERM (a timeout, a CI stop) unwinds normally, so the server started here stops.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "trajectories.jsonl").unlink(missing_ok=True)  # one run per --out
    tokenizer = train_chatml_tokenizer()
    config = make("guess_number", **DEMO_GUESS_CONFIG)
    model_dir = prepare_model(args.out, tokenizer, config, args.warmup_steps, args.seed)
    if args.url:
        summary = asyncio.run(run_loop(args, args.url, model_dir, tokenizer))
    else:
        options = VLLMOptions(served_model_name="grpo-tiny", lora_rank=8)
        with start_vllm(model_dir, args.out / "vllm.log", options) as server:
            summary = asyncio.run(run_loop(args, server.url, model_dir, tokenizer))
            summary["server_startup_s"] = server.startup_seconds
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
