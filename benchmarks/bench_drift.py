"""The drift alarm on a real vLLM server: false alarms over a long clean run, and how
often a sync that never loaded is caught by the first batch after it.

Per path (LoRA r8 at lr 1e-6, full at lr 1e-5: one AdamW step, ``one_rl_step``):

* clean: the step's weights are pushed and verified, then ``--batches`` batches of
  guess_number groups are sampled and each is compared with the trainer's forward
  pass of the same weights (:func:`measure_drift`, the fp32 tolerance); an alarm on
  any of them is a false alarm;
* stale: ``--trials`` times, the trainer moves to another step's weights and the
  policy claims the new version without loading it; the first batch after it must
  alarm.

Run: ``python benchmarks/bench_drift.py [--batches 100 --trials 10]`` (starts its own
server from ``.venv-vllm``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.weight_updates import _group_builders, _load, one_rl_step

from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.policies.tiny_model import save_vllm_tiny_model
from agentenvs.rollout.policies.vllm_server import VLLMOptions, start_vllm
from agentenvs.rollout.tokenizer import train_chatml_tokenizer
from agentenvs.rollout.weights.drift import measure_drift, rows_from_records
from agentenvs.rollout.weights.probe import Probe, torch_reference
from agentenvs.rollout.weights.proof import Tolerance
from agentenvs.rollout.weights.sync import WeightSync

PATHS = (("lora", 1e-6), ("full", 1e-5))
FP32 = Tolerance.for_dtype("float32")


async def batch_drift(policy, tokenizer, reference, version: int, seed: int):
    policy.seed = seed
    builders = _group_builders(tokenizer) * 4
    keys = [f"{seed}:{i}" for i in range(len(builders))]
    result = await collect(
        builders, policy, CollectOptions(concurrency=4, progress=False), keys=keys
    )
    rows = rows_from_records(result.ok, reference)
    return measure_drift(rows, trainer_version=version, tolerance=FP32)


async def measure(
    url: str, model_dir: Path, work: Path, batches: int, trials: int, paths: list[str]
) -> list:
    tokenizer = train_chatml_tokenizer()
    rows = []
    for path, lr in PATHS:
        if path not in paths:
            continue
        policy = OpenAICompatPolicy(
            url, tokenizer=tokenizer, seed=0, weights_version=0, max_tokens=12
        )
        sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))
        push = sync.push_lora if path == "lora" else sync.push_full
        trained = one_rl_step(model_dir, work / f"{path}-v1", lr=lr, lora=path == "lora", seed=1)
        await push(work / f"{path}-v1", torch_reference(trained))
        reference = torch_reference(trained)
        version = policy.weights_version
        false_alarms, worst_rms, worst_max, tokens = 0, 0.0, 0.0, 0
        for b in range(batches):
            report = await batch_drift(policy, tokenizer, reference, version, seed=1000 + b)
            (on,) = [v for v in report.versions if v.on_policy]
            false_alarms += report.alarm is not None
            worst_rms, worst_max = max(worst_rms, on.rms), max(worst_max, on.max_abs)
            tokens += on.tokens
        caught = 0
        for t in range(trials):
            other = one_rl_step(
                model_dir, work / f"{path}-t{t}", lr=lr, lora=path == "lora", seed=100 + t
            )
            claimed = policy.weights_version + 1
            policy.weights = replace(policy.weights, version=claimed)  # never loaded
            report = await batch_drift(
                policy, tokenizer, torch_reference(other), claimed, seed=5000 + t
            )
            caught += report.alarm is not None
        rows.append((path, lr, batches, tokens, false_alarms, worst_rms, worst_max, trials, caught))
        print(rows[-1], flush=True)
        # back to the base weights for the next path, through a fresh policy (this one
        # claims an adapter that is about to be unloaded)
        fresh = OpenAICompatPolicy(url, tokenizer=tokenizer, weights_version=0)
        await WeightSync(fresh, probe=Probe.default(len(tokenizer))).push_full(
            model_dir, torch_reference(_load(model_dir)), version=1
        )
        await sync.unload_adapters()
        await policy.aclose()
        await fresh.aclose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--paths", nargs="+", default=[p for p, _ in PATHS])
    args = parser.parse_args()
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir = save_vllm_tiny_model(work / "model", train_chatml_tokenizer(), seed=0)
        options = VLLMOptions(served_model_name="tiny-vllm", lora_rank=8)
        with start_vllm(model_dir, work / "vllm.log", options) as server:
            rows = asyncio.run(
                measure(server.url, model_dir, work, args.batches, args.trials, args.paths)
            )
    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d')}, {time.time() - started:.0f} s; fp32 tolerance rms "
          f"{FP32.rms:.3g}, max {FP32.max:.3g}")  # fmt: skip
    print("| path | lr | clean batches | on-policy tokens | false alarms | worst rms | worst max "
          "| stale trials | caught by the first batch |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for path, lr, b, tok, fa, wr, wm, tr, ca in rows:
        print(f"| {path} | {lr:g} | {b} | {tok} | {fa} | {wr:.2g} | {wm:.2g} | {tr} | {ca} |")


if __name__ == "__main__":
    main()
