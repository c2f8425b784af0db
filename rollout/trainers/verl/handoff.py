"""Training samples as a padded torch batch with verl's field names.

verl's agent loop hands its trainer a ``DataProto`` whose tensor batch has, per
row, the prompt left-padded and the response right-padded (see
``verl/experimental/agent_loop/agent_loop.py``):

* ``prompts`` ``[B, P]``: the sample's tokens before its first sampled token;
* ``responses`` ``[B, R]``: everything from the first sampled token on, including
  later observation/tool tokens;
* ``input_ids`` ``[B, P + R]`` = ``cat(prompts, responses)``;
* ``attention_mask`` ``[B, P + R]``: 1 on tokens, 0 on padding;
* ``position_ids`` ``[B, P + R]``: ``clip(cumsum(attention_mask) - 1, 0)``;
* ``response_mask`` ``[B, R]``: 1 on tokens the loss trains (sampled tokens), 0 on
  observation/tool tokens and padding;
* ``old_log_probs`` and ``rollout_log_probs`` ``[B, R]`` (float32): the sampler's
  logprobs, 0.0 on observation tokens and padding. verl normally recomputes
  ``old_log_probs`` with the actor; a trainer that trusts the sampler can use
  these, and verl's rollout-correction code reads ``rollout_log_probs``;
* ``advantages`` ``[B, R]`` (float32): 0.0 off ``response_mask``;
* ``rm_scores`` ``[B, R]`` (float32): the sample's reward on its last response
  token, 0.0 elsewhere, where verl's agent loop puts a loop's ``reward_score``
  (its trainer then skips its own reward manager).

Extra per-row tensors keep the provenance: ``group_index``, ``traj_index``,
``sample_index`` (int64), ``reward`` and ``trajectory_advantage`` (float64) and
``has_logprobs`` (bool).
:func:`from_verl_batch` undoes the padding and gives the samples back, read from the
fields verl trains on: the tokens under ``attention_mask``, the loss mask from
``response_mask``, the sampler's logprobs from ``rollout_log_probs``, the reward from
``rm_scores`` (its sum over the row, where verl reads it).

A batch file (:func:`save_verl_batch`, :func:`load_verl_batch`) is a safetensors file
holding those tensors under the same names, readable without torch or pickle, with
its metadata key ``agentenvs`` a JSON object: ``format`` (``agentenvs-verl-batch/1``),
``collected`` (per row, the sample's collection record or null: what ``agentenvs
check`` compares the row with) and ``extra`` (the estimator, as the JSONL hand-off
carries it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agentenvs.rollout.data.samples import TrainingSample

if TYPE_CHECKING:
    import torch

BATCH_FILE_FORMAT = "agentenvs-verl-batch/1"
METADATA_KEY = "agentenvs"


def to_verl_batch(
    samples: Sequence[TrainingSample],
    pad_token_id: int,
    *,
    prompt_length: int | None = None,
    response_length: int | None = None,
) -> dict[str, torch.Tensor]:
    """Pad samples into verl's batch layout (see the module docstring).

    ``pad_token_id`` is the tokenizer's pad token (``tokenizer.pad_token_id``).
    ``prompt_length`` / ``response_length`` fix the padded widths, as verl's
    ``rollout.prompt_length`` / ``response_length`` do; by default they are the
    longest prompt and response in the batch. A sample longer than a fixed width
    raises ``ValueError``: cutting tokens would silently change what is trained.
    """
    import torch

    if not samples:
        raise ValueError("cannot build a verl batch from zero samples")
    prompts = [s.prompt_length for s in samples]
    responses = [len(s.tokens) - s.prompt_length for s in samples]
    width_p = max(prompts) if prompt_length is None else prompt_length
    width_r = max(responses) if response_length is None else response_length
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        if p > width_p or r > width_r:
            raise ValueError(
                f"sample {i} has a {p}-token prompt and a {r}-token response; "
                f"the batch holds at most {width_p} and {width_r}"
            )

    size = len(samples)
    ids = np.full((size, width_p + width_r), pad_token_id, dtype=np.int64)
    attention = np.zeros((size, width_p + width_r), dtype=np.int64)
    response_mask = np.zeros((size, width_r), dtype=np.int64)
    logprobs = np.zeros((size, width_r), dtype=np.float32)
    advantages = np.zeros((size, width_r), dtype=np.float32)
    rm_scores = np.zeros((size, width_r), dtype=np.float32)
    for row, sample in enumerate(samples):
        p = sample.prompt_length
        end = width_p + len(sample.tokens) - p
        ids[row, width_p - p : end] = sample.tokens
        attention[row, width_p - p : end] = 1
        response_mask[row, : end - width_p] = sample.loss_mask[p:]
        logprobs[row, : end - width_p] = sample.logprobs[p:]
        advantages[row, : end - width_p] = sample.advantages[p:]
        # verl indexes by (response length - 1): an empty response scores the last column;
        # a batch with no response column at all has nowhere to put a score.
        if width_r:
            rm_scores[row, end - width_p - 1] = sample.reward

    input_ids = torch.from_numpy(ids)
    attention_mask = torch.from_numpy(attention)
    old_log_probs = torch.from_numpy(logprobs)
    anchored = {}
    if any(s.anchor_keys for s in samples):
        # GiGPO groups steps by anchor state: the first step's key as a 63-bit integer.
        anchored["anchor_id"] = torch.tensor(
            [anchor_id(s.anchor_keys[0]) if s.anchor_keys else 0 for s in samples],
            dtype=torch.int64,
        )
    return {
        **anchored,
        **_token_versions(samples, width_r),
        "prompts": input_ids[:, :width_p],
        "responses": input_ids[:, width_p:],
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": torch.clip(torch.cumsum(attention_mask, dim=-1) - 1, min=0),
        "response_mask": torch.from_numpy(response_mask),
        "old_log_probs": old_log_probs,
        "rollout_log_probs": old_log_probs.clone(),
        "advantages": torch.from_numpy(advantages),
        "rm_scores": torch.from_numpy(rm_scores),
        "group_index": torch.tensor([s.group_index for s in samples], dtype=torch.int64),
        "traj_index": torch.tensor([s.traj_index for s in samples], dtype=torch.int64),
        "sample_index": torch.tensor([s.sample_index for s in samples], dtype=torch.int64),
        "reward": torch.tensor([s.reward for s in samples], dtype=torch.float64),
        "trajectory_advantage": torch.tensor([s.advantage for s in samples], dtype=torch.float64),
        "has_logprobs": torch.tensor([s.has_logprobs for s in samples], dtype=torch.bool),
    }


def _token_versions(samples: Sequence[TrainingSample], width_r: int) -> dict[str, torch.Tensor]:
    """``token_versions`` (rows x response width, int64): the weights version that
    sampled each response token, -1 on observation tokens and padding; only when
    some turn was stamped. Versions that are not integers cannot be a tensor."""
    import torch

    if not any(s.token_versions for s in samples):
        return {}
    versions = np.full((len(samples), width_r), -1, dtype=np.int64)
    for row, sample in enumerate(samples):
        for i, version in enumerate(sample.token_versions[sample.prompt_length :]):
            if version is None:
                continue
            if not isinstance(version, int):
                raise ValueError(f"sample {row}: weights version {version!r} is not an integer")
            versions[row, i] = version
    return {"token_versions": torch.from_numpy(versions)}


def anchor_id(anchor_key: str) -> int:
    """An anchor key (hex) as a non-negative int64; 0 for none."""
    return int(anchor_key, 16) & (2**63 - 1) if anchor_key else 0


def to_tensordict(batch: Mapping[str, torch.Tensor]) -> Any:
    """The batch as a ``tensordict.TensorDict`` (what ``DataProto.batch`` holds).

    ``tensordict`` comes with verl; it is not a dependency of agentenvs.
    """
    try:
        from tensordict import TensorDict
    except ImportError as error:
        raise ImportError(
            "to_tensordict needs the 'tensordict' package (installed with verl)"
        ) from error
    size = next(iter(batch.values())).shape[0]
    return TensorDict(dict(batch), batch_size=[size])


def from_verl_batch(batch: Mapping[str, Any]) -> list[TrainingSample]:
    """Undo :func:`to_verl_batch`: one unpadded sample per row (torch tensors or numpy
    arrays), from the fields verl trains on (see the module docstring).

    Logprobs and advantages come back as float32 values (the batch's precision); the
    reward is the row's ``rm_scores`` summed (the ``reward`` tensor when a batch has no
    ``rm_scores``).
    """
    arrays = {name: _numpy(value) for name, value in batch.items()}
    width_p = arrays["prompts"].shape[1]
    attention = arrays["attention_mask"].astype(bool)
    input_ids = arrays["input_ids"]
    sampler = arrays.get("rollout_log_probs", arrays.get("old_log_probs"))
    samples = []
    for row in range(input_ids.shape[0]):
        keep = attention[row]
        tokens = input_ids[row][keep].tolist()
        p = int(keep[:width_p].sum())
        r = len(tokens) - p
        # a batch with no response column has its scores only in ``reward``
        if "rm_scores" in arrays and arrays["rm_scores"].shape[1]:
            reward = float(arrays["rm_scores"][row].astype(np.float64).sum())
        else:
            reward = float(arrays["reward"][row])
        samples.append(
            TrainingSample(
                tokens=tokens,
                loss_mask=[0] * p + arrays["response_mask"][row, :r].astype(int).tolist(),
                logprobs=[0.0] * p + (sampler[row, :r].tolist() if sampler is not None else [0.0] * r),
                advantages=[0.0] * p + arrays["advantages"][row, :r].tolist(),
                group_index=int(arrays["group_index"][row]),
                traj_index=int(arrays["traj_index"][row]),
                sample_index=int(arrays["sample_index"][row]),
                reward=reward,
                has_logprobs=bool(arrays["has_logprobs"][row]) if "has_logprobs" in arrays else sampler is not None,
                prompt_length=p,
                advantage=float(arrays["trajectory_advantage"][row]),
                token_versions=_row_versions(arrays, row, p, r),
            )
        )  # fmt: skip
    return samples


def _row_versions(arrays: Mapping[str, np.ndarray], row: int, p: int, r: int) -> list[Any]:
    if "token_versions" not in arrays:
        return []
    values = arrays["token_versions"][row, :r].tolist()
    return [None] * p + [int(v) if v >= 0 else None for v in values]


def _numpy(value: Any) -> np.ndarray:
    """A torch tensor or numpy array as numpy (on the CPU)."""
    if isinstance(value, np.ndarray):
        return value
    return value.detach().cpu().numpy()


@dataclass
class VerlBatchFile:
    """A batch read back from a batch file: its tensors (as numpy) and what rides along."""

    tensors: dict[str, np.ndarray]
    collected: list[dict[str, Any] | None] = field(default_factory=list)
    """Per row, the sample's collection record (None where it had none)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def samples(self) -> list[TrainingSample]:
        """The rows as samples, each with its collection record."""
        found = from_verl_batch(self.tensors)
        for sample, collected in zip(found, self.collected, strict=False):
            sample.collected = collected
        return found


def save_verl_batch(
    batch: Mapping[str, Any],
    path: str | Path,
    *,
    samples: Sequence[TrainingSample] = (),
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``batch`` (as :func:`to_verl_batch` made it from ``samples``) to a batch file
    (see the module docstring); ``samples`` give each row its collection record."""
    from safetensors.numpy import save_file

    tensors = {name: np.ascontiguousarray(_numpy(value)) for name, value in batch.items()}
    metadata = {
        "format": BATCH_FILE_FORMAT,
        "collected": [s.collected for s in samples] if samples else None,
        "extra": dict(extra or {}),
    }
    save_file(tensors, str(path), metadata={METADATA_KEY: json.dumps(metadata)})
    return Path(path)


def load_verl_batch(path: str | Path) -> VerlBatchFile:
    """Read a batch file; ValueError naming the file when it is not one."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as handle:
            metadata = json.loads((handle.metadata() or {}).get(METADATA_KEY, "{}"))
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a verl batch file ({error})") from None
    if metadata.get("format") != BATCH_FILE_FORMAT:
        raise ValueError(f"{path}: a safetensors file but not a verl batch ({BATCH_FILE_FORMAT})")
    rows = int(tensors["input_ids"].shape[0]) if "input_ids" in tensors else 0
    collected = metadata.get("collected") or [None] * rows
    return VerlBatchFile(tensors, list(collected), dict(metadata.get("extra") or {}))
