"""Keep a vLLM server on TRL's current weights: on-policy GRPO without NCCL.

TRL's own vLLM path (``GRPOTrainer(use_vllm=True, vllm_mode="server")``) moves
weights with an NCCL engine and refuses to start without a CUDA device. With
``use_vllm=False`` and this project's ``rollout_func`` sampling from a vLLM server
(``policy=OpenAICompatPolicy(url, ...)``), TRL never touches the server's weights,
so every step after the first would train on samples from the starting model.

:class:`VLLMWeightSyncCallback` closes that loop over plain HTTP. After each
optimizer step (``on_step_end``, when ``state.global_step`` is already the new
step number ``N``) it saves the trainer's weights (the adapter alone for a peft
model, else the whole checkpoint), has :class:`~agentenvs.rollout.weights.sync.WeightSync`
load them into the server, reset its prefix cache and check its logprobs on a
fixed probe against the trainer's own forward pass, and only then moves the
policy to version ``N``. The next generation batch runs at ``global_step == N``,
so every turn it samples is stamped with verified version ``N``: the trainer's
step. ``on_train_begin`` pushes the starting weights as version 0 the same way,
so the first batch is vouched for too.

TRL generates once per ``steps_per_generation`` optimizer steps (and reuses a
batch ``num_iterations`` times); samples then carry the version they were
generated with, which is TRL's own design, not staleness added here.

Single process only: the sync runs on the main process and updates that
process's policy object.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Literal

from transformers import TrainerCallback

from agentenvs.rollout.trainers.common import run_sync
from agentenvs.rollout.weights.probe import torch_reference
from agentenvs.rollout.weights.sync import SyncReport, WeightSync

SyncChoice = Literal["auto", "lora", "full"]


def is_peft_model(model: Any) -> bool:
    """True for a peft-wrapped model, whose ``save_pretrained`` writes the adapter only."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


class VLLMWeightSyncCallback(TrainerCallback):
    """Push, verify and version the trainer's weights on a vLLM server after each step.

    ``sync`` wraps the same :class:`OpenAICompatPolicy` the ``rollout_func`` samples
    with (that policy's identity is what the sync moves). ``checkpoints`` is where
    each version is saved for the server to read; it must be a path the server can
    open (same machine, or a shared filesystem). ``path="auto"`` pushes a LoRA
    adapter for a peft model and full weights otherwise. The newest ``keep``
    saved versions stay on disk (the server may re-read an adapter it evicted), at
    least one more than the adapters the sync keeps loaded.

    A failed verification raises out of the training loop: training on samples
    from weights nobody can vouch for is what this callback exists to prevent.
    """

    def __init__(
        self,
        sync: WeightSync,
        checkpoints: str | Path,
        *,
        path: SyncChoice = "auto",
        push_initial: bool = True,
        keep: int = 3,
    ) -> None:
        if path not in ("auto", "lora", "full"):
            raise ValueError(f"path must be 'auto', 'lora' or 'full', got {path!r}")
        self.sync = sync
        self.checkpoints = Path(checkpoints)
        self.path: SyncChoice = path
        self.push_initial = push_initial
        self.keep = max(keep, sync.keep_adapters + 1)
        self.saved: list[Path] = []
        self.reports: list[SyncReport] = []
        """One report per push, in order: version, probe difference, timings."""
        self.push_seconds: list[float] = []
        """Wall time of each whole push: saving and hashing the weights, then the sync
        (the report's ``total_s`` covers the sync alone)."""

    # ---- TrainerCallback hooks -------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.push_initial and state.is_world_process_zero:
            self.push(model, int(state.global_step))

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.is_world_process_zero:
            self.push(model, int(state.global_step))

    # ---- the push --------------------------------------------------------------------
    def resolve_path(self, model: Any) -> Literal["lora", "full"]:
        if self.path != "auto":
            if self.path == "lora" and not is_peft_model(model):
                raise ValueError("path='lora' needs a peft model (pass peft_config to the trainer)")
            return self.path
        return "lora" if is_peft_model(model) else "full"

    def push(self, model: Any, version: int) -> SyncReport:
        """Save ``model`` as ``version``, load it into the server and verify it."""
        if model is None:
            raise ValueError("the trainer passed no model to the callback")
        started = time.perf_counter()
        path = self.resolve_path(model)
        directory = self.checkpoints / f"{path}-v{version}"
        if directory.exists():
            shutil.rmtree(directory)  # a resumed run saving the same version again
        model.save_pretrained(directory)
        reference = torch_reference(model)

        async def load_and_verify() -> SyncReport:
            try:
                if path == "lora":
                    return await self.sync.push_lora(directory, reference, version=version)
                return await self.sync.push_full(directory, reference, version=version)
            finally:
                # The trainer runs each call on a fresh event loop: do not keep a
                # client bound to this one.
                await self.sync.policy.aclose()

        report = run_sync(load_and_verify())
        self.reports.append(report)
        self.saved.append(directory)
        self._prune()
        self.push_seconds.append(time.perf_counter() - started)
        return report

    def _prune(self) -> None:
        while len(self.saved) > self.keep:
            shutil.rmtree(self.saved.pop(0), ignore_errors=True)


__all__ = ["VLLMWeightSyncCallback", "is_peft_model"]
