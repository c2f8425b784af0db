"""Training samples as ``tinker.Datum`` objects, the way the Tinker cookbook builds them.

Each datum is the one-token shift of a sample: ``model_input`` is ``tokens[:-1]``
and ``loss_fn_inputs`` hold, for every input position, the next token
(``target_tokens``), its sampler logprob, advantage and loss mask. The result is
field-for-field what ``tinker_cookbook.rl.data_processing.assemble_training_data``
returns for the same trajectories (tests check it), made without per-token Python
loops or torch tensors.

One deliberate difference: ``advantages`` is always float32. The cookbook makes it
int64 for a datum that has no action token after the shift (a degenerate,
action-less sample), because it builds the tensor from a list of Python ints there.

``to_cookbook_group`` converts our trajectories to the cookbook's types, for
comparing both and for feeding cookbook code.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agentenvs.envs.types import TrajectoryGroup
from agentenvs.rollout.data.samples import TrainingSample, gc_paused, trajectories_to_samples
from agentenvs.rollout.trainers.common import warn_missing_logprobs, warn_no_logprobs
from agentenvs.rollout.trainers.jsonl.datums import datum_line, write_datums_jsonl

if TYPE_CHECKING:
    import tinker


def _packed(values: list, code: str, dtype: type) -> np.ndarray:
    """``values`` as a numpy array, via ``struct``: about twice as fast as ``np.array``
    on a list of Python numbers, and it refuses non-integers for integer codes."""
    out = np.empty(len(values), dtype=dtype)
    struct.pack_into(f"{len(values)}{code}", out, 0, *values)
    return out


def _float32(values: list[float]) -> np.ndarray:
    try:
        return _packed(values, "f", np.float32)
    except (OverflowError, struct.error):  # beyond float32 range: round to +-inf as torch does
        return np.array(values, dtype=np.float32)


def _tokens(values: list[int]) -> np.ndarray:
    try:
        return _packed(values, "q", np.int64)
    except struct.error as error:
        raise ValueError(f"token ids must be integers: {error}") from None


def _mask(mask: list[int]) -> np.ndarray:
    try:
        return np.frombuffer(bytes(mask), dtype=np.uint8).astype(np.float32)
    except (ValueError, TypeError):  # not 0..255 ints (a hand-made sample)
        return _float32(mask)


def sample_to_datum(
    sample: TrainingSample, *, include_mask: bool = True, validate: bool = False
) -> tinker.Datum:
    """One sample as a Tinker datum (see the module docstring).

    Every array is converted once over the whole sample and then shifted as a
    view, so each token object is read as few times as possible. ``validate``
    runs pydantic validation on the token list; by default the chunk is built
    with ``model_construct``, since the int64 packing has already checked that
    the tokens are integers.
    """
    import tinker
    from tinker import TensorData

    tokens = sample.tokens
    n = len(tokens) - 1
    if n < 1:
        raise ValueError(
            f"sample (group {sample.group_index}, trajectory {sample.traj_index}, "
            f"sample {sample.sample_index}) has {n + 1} token(s); a datum needs at least 2"
        )
    if not (len(sample.loss_mask) == len(sample.logprobs) == len(sample.advantages) == n + 1):
        raise ValueError(
            f"sample (group {sample.group_index}, trajectory {sample.traj_index}): "
            "tokens, loss_mask, logprobs and advantages differ in length"
        )
    shape = [n]
    loss_fn_inputs = {
        "target_tokens": TensorData(_tokens(tokens)[1:], "int64", shape),
        "logprobs": TensorData(_float32(sample.logprobs)[1:], "float32", shape),
        "advantages": TensorData(_float32(sample.advantages)[1:], "float32", shape),
    }
    if include_mask:
        loss_fn_inputs["mask"] = TensorData(_mask(sample.loss_mask)[1:], "float32", shape)
    if validate:
        model_input = tinker.ModelInput(chunks=[tinker.EncodedTextChunk(tokens=tokens[:-1])])
    else:
        chunk = tinker.EncodedTextChunk.model_construct(tokens=tokens[:-1])
        model_input = tinker.ModelInput.model_construct(chunks=[chunk])
    return tinker.Datum(model_input=model_input, loss_fn_inputs=loss_fn_inputs)


def to_tinker_datums(
    samples: Sequence[TrainingSample], *, include_mask: bool = True, validate: bool = False
) -> list[tinker.Datum]:
    """Samples as Tinker datums, in order.

    ``include_mask`` keeps the cookbook's ``mask`` input (used for metrics; the
    cookbook drops it before ``forward_backward``, since masked tokens already
    have advantage 0). Samples without sampler logprobs get 0.0 there and a
    :class:`~agentenvs.rollout.trainers.common.MissingLogprobsWarning`: Tinker's
    importance-sampling and PPO losses read them as the sampler's.
    """
    warn_missing_logprobs(samples, "to_tinker_datums")
    with gc_paused():
        return [
            sample_to_datum(sample, include_mask=include_mask, validate=validate)
            for sample in samples
        ]


def assemble_tinker_data(
    groups: list[TrajectoryGroup], advantages: Sequence[Sequence[float | Sequence[float]]]
) -> tuple[list[tinker.Datum], list[dict[str, Any]]]:
    """The counterpart of the cookbook's ``assemble_training_data``: datums plus, per
    datum, the ``group_idx`` and ``traj_idx`` it came from (and, when the turns were
    stamped, ``token_versions``: per target, the weights version that sampled it,
    None on observation tokens). A trajectory's advantage
    may be a list with one value per step (``compute_advantages(groups, "gigpo")``),
    which the cookbook has no counterpart for."""
    plain = [
        [[float(v) for v in a] if isinstance(a, Sequence) else float(a) for a in group_advantages]
        for group_advantages in advantages
    ]
    # One pause over both steps: the intermediate samples are freed by reference
    # counting before the collector runs again, so it never has to walk them.
    with gc_paused():
        samples = trajectories_to_samples(groups, plain)
        datums = to_tinker_datums(samples)
        metadata: list[dict[str, Any]] = [
            {"group_idx": s.group_index, "traj_idx": s.traj_index}
            | ({"token_versions": s.token_versions[1:]} if s.token_versions else {})
            for s in samples
        ]
        del samples
    return datums, metadata


def to_cookbook_group(group: TrajectoryGroup) -> Any:
    """Our group as a ``tinker_cookbook.rl.types.TrajectoryGroup``.

    The cookbook requires logprobs; an action without them gets 0.0 per token,
    which is what our samples hold for it too, and a
    :class:`~agentenvs.rollout.trainers.common.MissingLogprobsWarning` says so.
    """
    import tinker
    from tinker_cookbook.completers import TokensWithLogprobs
    from tinker_cookbook.rl import types as cookbook

    bare = sum(
        1
        for t in group.trajectories
        for tr in t.transitions
        if tr.ac.logprobs is None and tr.ac.tokens
    )
    if bare:
        warn_no_logprobs("to_cookbook_group", f"{bare} actions have no sampler logprobs")
    trajectories = []
    for traj in group.trajectories:
        transitions = [
            cookbook.Transition(
                ob=tinker.ModelInput.from_ints(list(tr.ob)),
                ac=TokensWithLogprobs(
                    tokens=list(tr.ac.tokens),
                    maybe_logprobs=(
                        [0.0] * len(tr.ac.tokens)
                        if tr.ac.logprobs is None
                        else list(tr.ac.logprobs)
                    ),
                    stop_reason=tr.ac.stop_reason if tr.ac.stop_reason != "eos" else "stop",
                ),
                reward=tr.reward,
                episode_done=tr.episode_done,
                metrics=dict(tr.metrics),
                logs=dict(tr.logs),
            )
            for tr in traj.transitions
        ]
        trajectories.append(
            cookbook.Trajectory(
                transitions=transitions,
                final_ob=tinker.ModelInput.from_ints(list(traj.final_ob)),
                stop_reason=traj.stop_reason,
            )
        )
    return cookbook.TrajectoryGroup(
        trajectories_G=trajectories,
        final_rewards_G=list(group.group_rewards),
        metrics_G=[dict(m) for m in group.group_metrics],
    )


def save_tinker_datums(
    samples: Sequence[TrainingSample],
    path: str | Path,
    *,
    extra: Mapping[str, Any] | None = None,
    include_mask: bool = True,
) -> int:
    """Write the datums :func:`to_tinker_datums` makes of ``samples`` to a datum file
    (``rollout/trainers/jsonl/datums.py``), each line naming its sample and carrying its
    collection record, so ``agentenvs check`` can check what Tinker will train on."""
    datums = to_tinker_datums(samples, include_mask=include_mask)
    lines = (
        datum_line(
            "tinker",
            datum.model_input.to_ints(),
            {name: tensor.tolist() for name, tensor in datum.loss_fn_inputs.items()},
            sample,
            extra,
        )
        for datum, sample in zip(datums, samples, strict=True)
    )
    return write_datums_jsonl(lines, path)
