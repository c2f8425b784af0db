"""Every hand-off form ``check`` reads, as samples plus the form's own structure checks.

A trainer does not read our samples: it reads a JSONL line, a verl batch row or a
Tinker/PyTRIO datum. Each form is read back into :class:`TrainingSample` objects
from the fields that trainer trains on, so every sample check applies to it, and the
form's own layout is checked where converters go wrong:

* a verl batch (``trainers/verl/handoff.py``): prompts left-padded and responses
  right-padded under one contiguous attention mask (a mask moved into the left
  padding trains on a pad token and drops a real one), ``position_ids`` the running
  count of attended tokens, ``prompts``/``responses`` the two halves of
  ``input_ids``, the loss mask only on attended response tokens, the reward in
  ``rm_scores`` on the last response token only;
* a datum file (``trainers/jsonl/datums.py``): every loss input one value per input
  token, each target the next input token (a converter that did not shift them
  trains the model to copy its input).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from agentenvs.rollout.data.samples import TrainingSample
from agentenvs.rollout.inspect.findings import Check, Finding

FileKind = Literal["trajectories", "samples", "verl", "datums"]


@dataclass
class HandOff:
    """A hand-off file read back: its samples, per-sample extras, its layout findings."""

    form: Literal["samples", "verl", "datums"]
    samples: list[TrainingSample] = field(default_factory=list)
    extras: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


def _first_json_line(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                try:
                    return json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(
                        f"{path} is not JSON lines ({err.msg}); pass a trajectory store, a "
                        "samples file, a verl batch file or a datum file"
                    ) from None
    raise ValueError(f"{path} is empty")


def _is_safetensors(path: Path) -> bool:
    """A safetensors file: a little-endian header length, then a JSON object."""
    with open(path, "rb") as handle:
        head = handle.read(9)
    if len(head) < 9:
        return False
    size = int.from_bytes(head[:8], "little")
    return 2 <= size <= path.stat().st_size and head[8:9] == b"{"


def file_kind(path: Path) -> FileKind:
    """What a file holds; ValueError when it is none of the forms ``check`` reads."""
    if _is_safetensors(path):
        return "verl"
    first = _first_json_line(path)
    if "trajectories" in first and "key" in first:
        return "trajectories"
    if str(first.get("format", "")).startswith("agentenvs-datum/"):
        return "datums"
    if "loss_mask" in first and "tokens" in first:
        return "samples"
    raise ValueError(
        f"{path} is neither a trajectory store (written by `agentenvs rollout --out`), a "
        "samples file (trainers/jsonl/handoff.py), a verl batch file (save_verl_batch) nor "
        "a datum file (save_tinker_datums, save_pytrio_datums)"
    )


def read_handoff(path: Path, kind: FileKind) -> HandOff:
    if kind == "verl":
        return _verl(path)
    if kind == "datums":
        return _datums(path)
    return _samples(path)


def _samples(path: Path) -> HandOff:
    from agentenvs.rollout.trainers.jsonl.handoff import sample_from_json

    hand = HandOff("samples")
    with open(path, encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                line = json.loads(text)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not JSON ({err.msg})") from None
            # Lengths are checked by the report, not refused while loading.
            hand.samples.append(sample_from_json(line, strict=False))
            hand.extras.append(line.get("extra") or {})
    return hand


# ---- verl ---------------------------------------------------------------------------------


def _runs(row: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of ones."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], row.astype(np.int8), [0]))))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def _verl_row_problem(tensors: dict[str, np.ndarray], row: int) -> tuple[int | None, str] | None:
    """(column, why) where one row breaks verl's layout."""
    width_p = tensors["prompts"].shape[1]
    attention = tensors["attention_mask"][row].astype(np.int64)
    runs = _runs(attention)
    if len(runs) > 1 or (runs and (runs[0][0] > width_p or runs[0][1] < width_p)):
        column = runs[0][1] if len(runs) > 1 else runs[0][0]
        return column, (
            "the attention mask is not one run from the left-padded prompt into the "
            "right-padded response: it covers padding (a mask moved into the left padding)"
        )
    if "position_ids" in tensors:
        want = np.clip(np.cumsum(attention) - 1, 0, None)
        got = tensors["position_ids"][row]
        if not np.array_equal(got, want):
            column = int(np.flatnonzero(got != want)[0])
            return column, "position_ids are not the running count of attended tokens"
    ids = tensors["input_ids"][row]
    for name, part in (("prompts", ids[:width_p]), ("responses", ids[width_p:])):
        if name in tensors and not np.array_equal(tensors[name][row], part):
            column = int(np.flatnonzero(tensors[name][row] != part)[0])
            return column + (
                width_p if name == "responses" else 0
            ), f"{name} is not its half of input_ids"
    response = attention[width_p:]
    mask = tensors["response_mask"][row].astype(np.int64)
    if np.any(mask & (1 - response)):
        column = int(np.flatnonzero(mask & (1 - response))[0])
        return width_p + column, "response_mask trains a padding column"
    if "rm_scores" in tensors:
        scores = tensors["rm_scores"][row]
        last = int(response.sum()) - 1
        elsewhere = np.flatnonzero(scores)
        elsewhere = elsewhere[elsewhere != max(last, 0)]
        if elsewhere.size:
            return width_p + int(
                elsewhere[0]
            ), "rm_scores holds a score off the last response token"
        if "reward" in tensors:
            score, reward = float(scores.sum()), float(tensors["reward"][row])
            if not math.isclose(score, reward, rel_tol=1e-5, abs_tol=1e-6):
                return None, f"rm_scores gives reward {score:g} but the row's reward is {reward:g}"
    return None


def _verl(path: Path) -> HandOff:
    from agentenvs.rollout.trainers.verl.handoff import load_verl_batch

    batch = load_verl_batch(path)
    hand = HandOff(
        "verl", batch.samples(), [dict(batch.extra)] * batch.tensors["input_ids"].shape[0]
    )
    rows = batch.tensors["input_ids"].shape[0]
    for row in range(rows):
        problem = _verl_row_problem(batch.tensors, row)
        if problem is not None:
            column, why = problem
            s = hand.samples[row]
            where = f"group {s.group_index} traj {s.traj_index} sample {s.sample_index} (row {row}"
            where += f", column {column})" if column is not None else ")"
            hand.findings.append(
                Finding(Check.FIXED_TRAJECTORY, "fail", f"verl batch: {why}", where)
            )
            break
    else:
        detail = (
            f"verl batch: {rows} rows padded as verl pads them (attention, position_ids, "
            "prompts/responses, response_mask, rm_scores)"
        )
        hand.findings.append(Finding(Check.FIXED_TRAJECTORY, "pass", detail))
    return hand


# ---- datums -------------------------------------------------------------------------------


def _datum_problem(line: Any) -> tuple[int, str] | None:
    n = len(line.model_input)
    for name, values in line.loss_fn_inputs.items():
        if len(values) != n:
            return 0, f"loss input {name!r} has {len(values)} values for {n} input tokens"
    targets = line.loss_fn_inputs.get("target_tokens") or []
    for i in range(n - 1):
        if targets[i] != -100 and int(targets[i]) != line.model_input[i + 1]:
            return i, (
                f"target {i} is {int(targets[i])} but the next input token is "
                f"{line.model_input[i + 1]}: targets not shifted by one"
            )
    mask = line.loss_fn_inputs.get("mask")
    if mask is not None and any(float(m) not in (0.0, 1.0) for m in mask):
        return 0, "Tinker's mask holds values other than 0 and 1"
    return None


def _datums(path: Path) -> HandOff:
    from agentenvs.rollout.trainers.jsonl.datums import read_datums_jsonl

    lines = read_datums_jsonl(path)
    hand = HandOff("datums", [line.to_sample() for line in lines], [line.extra for line in lines])
    trainers = sorted({line.trainer for line in lines})
    for line in lines:
        problem = _datum_problem(line)
        if problem is not None:
            pos, why = problem
            where = (
                f"group {line.group_index} traj {line.traj_index} sample {line.sample_index} "
                f"token {pos + 1}"
            )
            hand.findings.append(Finding(Check.FIXED_TRAJECTORY, "fail", f"{line.trainer} datum: {why}", where))  # fmt: skip
            return hand
    detail = f"{'/'.join(trainers)} datums: {len(lines)}, every target the next input token"
    hand.findings.append(Finding(Check.FIXED_TRAJECTORY, "pass", detail))
    return hand
