"""Tinker and PyTRIO datums as JSON lines: a file a trainer's inputs can be checked from.

A datum is a sample shifted by one token (``tokenizer`` -> ``model_input`` is
``tokens[:-1]``, ``loss_fn_inputs`` give each input position its next token and that
token's values), which is exactly where converters go wrong: targets not shifted, a
mask or logprobs shifted one way and the tokens the other. ``agentenvs check`` reads
this file (``rollout/inspect/handoff_forms.py``) and checks the datums as the trainer
will read them.

One line per datum, every list plain JSON:

| field | holds |
|---|---|
| ``format`` | ``agentenvs-datum/1`` |
| ``trainer`` | ``tinker`` or ``pytrio`` |
| ``model_input`` | the datum's input ids (``ModelInput``'s tokens) |
| ``loss_fn_inputs`` | each input the loss reads, as a list: ``target_tokens``, ``logprobs``, ``advantages``, and Tinker's ``mask`` (PyTRIO has none; ``-100`` targets are its skipped ones) |
| ``group_index``, ``traj_index``, ``sample_index``, ``reward``, ``advantage``, ``has_logprobs`` | the sample the datum was made from, as the JSONL samples hand-off names it |
| ``loss_mask`` | PyTRIO only: the sample's loss mask (its losses read none; a token is trained when its advantage is not 0) |
| ``last_token`` | the sample's last token, when its target is ``-100`` (PyTRIO's skipped targets) |
| ``token_versions`` | per target, the weights version that sampled it (null on observation tokens), when the turns were stamped |
| ``collected``, ``extra`` | the sample's collection record and the estimator, as in the samples hand-off |
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentenvs.rollout.data.samples import TrainingSample

DATUM_FORMAT = "agentenvs-datum/1"
IGNORE_INDEX = -100
Trainer = Literal["tinker", "pytrio"]


@dataclass
class DatumLine:
    """One datum as the file holds it (see the module docstring)."""

    trainer: Trainer
    model_input: list[int]
    loss_fn_inputs: dict[str, list[float | int]]
    group_index: int
    traj_index: int
    sample_index: int
    reward: float
    advantage: float
    has_logprobs: bool = True
    loss_mask: list[int] | None = None
    last_token: int | None = None
    collected: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    token_versions: list[Any] | None = None
    """Per target (shifted like the loss inputs), the version that sampled it."""

    def to_json(self) -> dict[str, Any]:
        line: dict[str, Any] = {
            "format": DATUM_FORMAT,
            "trainer": self.trainer,
            "model_input": self.model_input,
            "loss_fn_inputs": self.loss_fn_inputs,
            "group_index": self.group_index,
            "traj_index": self.traj_index,
            "sample_index": self.sample_index,
            "reward": self.reward,
            "advantage": self.advantage,
            "has_logprobs": self.has_logprobs,
        }
        optional = {"loss_mask": self.loss_mask, "last_token": self.last_token}
        optional["token_versions"] = self.token_versions
        optional["collected"] = self.collected
        line.update({name: value for name, value in optional.items() if value is not None})
        if self.extra:
            line["extra"] = self.extra
        return line

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DatumLine:
        if data.get("format") != DATUM_FORMAT:
            raise ValueError(f"not a datum line ({DATUM_FORMAT})")
        return cls(
            trainer=data["trainer"],
            model_input=[int(t) for t in data["model_input"]],
            loss_fn_inputs={k: list(v) for k, v in dict(data["loss_fn_inputs"]).items()},
            group_index=int(data["group_index"]),
            traj_index=int(data["traj_index"]),
            sample_index=int(data["sample_index"]),
            reward=float(data["reward"]),
            advantage=float(data["advantage"]),
            has_logprobs=bool(data.get("has_logprobs", True)),
            loss_mask=data.get("loss_mask"),
            last_token=data.get("last_token"),
            collected=data.get("collected"),
            extra=dict(data.get("extra") or {}),
            token_versions=data.get("token_versions"),
        )

    def to_sample(self) -> TrainingSample:
        """The sample this datum trains on, unshifted: ``model_input`` plus the last
        target, each target's values moved back onto its token; the mask is Tinker's
        ``mask``, PyTRIO's recorded ``loss_mask`` (its targets that are not ``-100``
        when it has none)."""
        inputs = self.loss_fn_inputs
        targets = [int(t) for t in inputs.get("target_tokens", [])]
        last = targets[-1] if targets and targets[-1] != IGNORE_INDEX else self.last_token
        tokens = [*self.model_input, int(last if last is not None else IGNORE_INDEX)]
        n = len(tokens)
        if self.trainer == "tinker":
            mask = [0, *(round(float(m)) for m in inputs.get("mask", [0] * (n - 1)))]
        elif self.loss_mask is not None:
            mask = [int(m) for m in self.loss_mask]
        else:
            mask = [0, *(int(t != IGNORE_INDEX) for t in targets)]
        return TrainingSample(
            tokens=tokens,
            loss_mask=mask,
            logprobs=[0.0, *(float(x) for x in inputs.get("logprobs", []))],
            advantages=[0.0, *(float(x) for x in inputs.get("advantages", []))],
            group_index=self.group_index,
            traj_index=self.traj_index,
            sample_index=self.sample_index,
            reward=self.reward,
            has_logprobs=self.has_logprobs,
            prompt_length=next((i for i, m in enumerate(mask) if m), n),
            advantage=self.advantage,
            collected=self.collected,
            token_versions=[None, *self.token_versions] if self.token_versions else [],
        )


def datum_line(
    trainer: Trainer,
    model_input: Sequence[int],
    loss_fn_inputs: Mapping[str, Sequence[float | int]],
    sample: TrainingSample,
    extra: Mapping[str, Any] | None = None,
) -> DatumLine:
    """The line of one datum (its input ids and loss inputs as lists) made from ``sample``."""
    inputs = {name: list(values) for name, values in loss_fn_inputs.items()}
    targets = inputs.get("target_tokens") or []
    ignored_last = bool(targets) and targets[-1] == IGNORE_INDEX
    return DatumLine(
        trainer=trainer,
        model_input=[int(t) for t in model_input],
        loss_fn_inputs=inputs,
        group_index=sample.group_index,
        traj_index=sample.traj_index,
        sample_index=sample.sample_index,
        reward=sample.reward,
        advantage=sample.advantage,
        has_logprobs=sample.has_logprobs,
        loss_mask=list(sample.loss_mask) if trainer == "pytrio" else None,
        last_token=sample.tokens[-1] if ignored_last else None,
        collected=sample.collected,
        extra=dict(extra or {}),
        token_versions=list(sample.token_versions[1:]) if sample.token_versions else None,
    )


def write_datums_jsonl(lines: Iterable[DatumLine], path: str | Path) -> int:
    """Write datum lines to ``path`` (overwritten); returns how many."""
    count = 0
    with open(path, "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps(line.to_json(), separators=(",", ":")) + "\n")
            count += 1
    return count


def read_datums_jsonl(path: str | Path) -> list[DatumLine]:
    """Datum lines back; ValueError naming the file and line for one that is not."""
    found = []
    with open(path, encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                found.append(DatumLine.from_json(json.loads(text)))
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(f"{path}:{number}: not a datum line ({error})") from None
    return found
