"""Training samples as plain JSON lines: one sample per line, plain lists.

For trainers this library does not know: every field of :class:`TrainingSample`
is written as-is (unshifted, unpadded), so any loader can rebuild what it needs.
``extra`` (for example :func:`agentenvs.rollout.data.advantages.estimator_info`) is
copied into every line under ``"extra"`` so a line is self-describing; the reader
leaves it aside. A sample that shows images lists them under ``"images"`` by reference
(offset, placeholder count, pixel hash, size, grid, processor); the pixels are the
store's files (``rollout/collect/image_files.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from agentenvs.envs.wire import placement_from_json, placement_to_json
from agentenvs.rollout.data.samples import TrainingSample

FIELDS = (
    "group_index",
    "traj_index",
    "sample_index",
    "reward",
    "advantage",
    "has_logprobs",
    "prompt_length",
    "tokens",
    "loss_mask",
    "logprobs",
    "advantages",
)


def sample_to_json(
    sample: TrainingSample, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    line = {name: getattr(sample, name) for name in FIELDS}
    if sample.anchor_keys:  # only environments that name their states (ALFWorld) have them
        line["anchor_keys"] = list(sample.anchor_keys)
    if sample.collected:  # what was collected, so `agentenvs check` needs no store
        line["collected"] = sample.collected
    if sample.token_versions:  # the weights version of each token (stamped turns only)
        line["token_versions"] = list(sample.token_versions)
    if sample.images:  # by reference: the pixels stay beside the store, named by hash
        line["images"] = [placement_to_json(p) for p in sample.images]
    if extra:
        line["extra"] = dict(extra)
    return line


def sample_from_json(line: Mapping[str, Any], *, strict: bool = True) -> TrainingSample:
    """A sample from its JSON line; ``strict`` refuses per-token lists of the wrong
    length (``agentenvs check`` reads them anyway, to report where they go wrong)."""
    tokens = [int(t) for t in line["tokens"]]
    lengths = {name: len(line[name]) for name in ("loss_mask", "logprobs", "advantages")}
    if strict and any(n != len(tokens) for n in lengths.values()):
        raise ValueError(f"sample has {len(tokens)} tokens but per-token lists of {lengths}")
    return TrainingSample(
        tokens=tokens,
        loss_mask=[int(m) for m in line["loss_mask"]],
        logprobs=[float(x) for x in line["logprobs"]],
        advantages=[float(x) for x in line["advantages"]],
        group_index=int(line["group_index"]),
        traj_index=int(line["traj_index"]),
        sample_index=int(line["sample_index"]),
        reward=float(line["reward"]),
        has_logprobs=bool(line.get("has_logprobs", True)),
        prompt_length=int(line.get("prompt_length", 0)),
        advantage=float(line.get("advantage", 0.0)),
        anchor_keys=[str(key) for key in line.get("anchor_keys", [])],
        collected=line.get("collected"),
        images=[placement_from_json(p) for p in line.get("images", [])],
        token_versions=list(line.get("token_versions", [])),
    )


def write_samples_jsonl(
    samples: Iterable[TrainingSample],
    out: str | Path | TextIO,
    *,
    extra: Mapping[str, Any] | None = None,
) -> int:
    """Write one JSON line per sample to a path (overwritten) or an open text file.

    Returns the number of lines written.
    """
    if isinstance(out, str | Path):
        with open(out, "w", encoding="utf-8") as handle:
            return write_samples_jsonl(samples, handle, extra=extra)
    count = 0
    for sample in samples:
        out.write(json.dumps(sample_to_json(sample, extra), separators=(",", ":")))
        out.write("\n")
        count += 1
    out.flush()
    return count


def iter_samples_jsonl(path: str | Path) -> Iterator[TrainingSample]:
    """Read samples back lazily; a malformed line raises ``ValueError`` naming it."""
    with open(path, encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                yield sample_from_json(json.loads(text))
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(
                    f"{path}:{number}: not a training sample line ({error})"
                ) from error


def read_samples_jsonl(path: str | Path) -> list[TrainingSample]:
    return list(iter_samples_jsonl(path))
