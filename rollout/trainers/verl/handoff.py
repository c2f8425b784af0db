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
:func:`from_verl_batch` undoes the padding and gives the samples back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from agentenvs.rollout.data.samples import TrainingSample

if TYPE_CHECKING:
    import torch


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


def from_verl_batch(batch: Mapping[str, torch.Tensor]) -> list[TrainingSample]:
    """Undo :func:`to_verl_batch`: one unpadded sample per row.

    Logprobs and advantages come back as float32 values (the batch's precision).
    """
    width_p = batch["prompts"].shape[1]
    attention = batch["attention_mask"].bool()
    input_ids = batch["input_ids"]
    samples = []
    for row in range(input_ids.shape[0]):
        keep = attention[row]
        tokens = input_ids[row][keep].tolist()
        p = int(keep[:width_p].sum())
        r = len(tokens) - p
        samples.append(
            TrainingSample(
                tokens=tokens,
                loss_mask=[0] * p + batch["response_mask"][row, :r].tolist(),
                logprobs=[0.0] * p + batch["old_log_probs"][row, :r].tolist(),
                advantages=[0.0] * p + batch["advantages"][row, :r].tolist(),
                group_index=int(batch["group_index"][row]),
                traj_index=int(batch["traj_index"][row]),
                sample_index=int(batch["sample_index"][row]),
                reward=float(batch["reward"][row]),
                has_logprobs=bool(batch["has_logprobs"][row]),
                prompt_length=p,
                advantage=float(batch["trajectory_advantage"][row]),
            )
        )
    return samples
