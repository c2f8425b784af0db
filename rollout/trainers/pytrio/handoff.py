"""Training samples as PyTRIO datums for ``TrainingClient.forward_backward``.

PyTRIO follows Tinker's semantics: the caller shifts (``auto_shift=False``, the
default), so ``model_input`` is ``tokens[:-1]`` and ``target_tokens``, ``logprobs``
and ``advantages`` are ``tokens[1:]`` and the matching per-token values. Its policy
losses (``importance_sampling``, ``ppo``, ``cispo``, ``dro``) read exactly those
three inputs and have no ``mask`` input: a token is left out of the policy
gradient by its advantage being 0, which our samples already guarantee on
prompt and observation tokens. That is the layout PyTRIO's own rollout example
uses.

PyTRIO counts every target that is not ``-100`` as an active token when it
normalises a batch (``plan_training_batch``). Pass ``ignore_masked_targets=True``
to write ``-100`` on prompt/observation targets so only trained tokens count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentenvs.rollout.data.samples import TrainingSample, gc_paused
from agentenvs.rollout.trainers.common import warn_missing_logprobs
from agentenvs.rollout.trainers.jsonl.datums import datum_line, write_datums_jsonl

if TYPE_CHECKING:
    import pytrio

IGNORE_INDEX = -100
"""The target id PyTRIO's trainer skips."""


def sample_to_pytrio_datum(
    sample: TrainingSample, *, ignore_masked_targets: bool = False
) -> pytrio.Datum:
    from pytrio.types import Datum, EncodedTextChunk, ModelInput, TensorData

    tokens = sample.tokens
    n = len(tokens) - 1
    if n < 1:
        raise ValueError(
            f"sample (group {sample.group_index}, trajectory {sample.traj_index}, "
            f"sample {sample.sample_index}) has {n + 1} token(s); a datum needs at least 2"
        )
    targets = tokens[1:]
    if ignore_masked_targets:
        targets = [
            token if keep else IGNORE_INDEX
            for token, keep in zip(targets, sample.loss_mask[1:], strict=True)
        ]
    shape = [n]
    return Datum(
        model_input=ModelInput(chunks=[EncodedTextChunk(tokens=tokens[:-1])]),
        loss_fn_inputs={
            "target_tokens": TensorData(data=targets, dtype="int64", shape=shape),
            "logprobs": TensorData(data=sample.logprobs[1:], dtype="float32", shape=shape),
            "advantages": TensorData(data=sample.advantages[1:], dtype="float32", shape=shape),
        },
    )


def to_pytrio_datums(
    samples: Sequence[TrainingSample], *, ignore_masked_targets: bool = False
) -> list[pytrio.Datum]:
    """Samples as ``pytrio.Datum`` objects, in order (see the module docstring).

    Samples without sampler logprobs get 0.0 and a
    :class:`~agentenvs.rollout.trainers.common.MissingLogprobsWarning`: PyTRIO's
    policy losses read them as the sampler's.
    """
    warn_missing_logprobs(samples, "to_pytrio_datums")
    with gc_paused():
        return [
            sample_to_pytrio_datum(sample, ignore_masked_targets=ignore_masked_targets)
            for sample in samples
        ]


def save_pytrio_datums(
    samples: Sequence[TrainingSample],
    path: str | Path,
    *,
    extra: Mapping[str, Any] | None = None,
    ignore_masked_targets: bool = False,
) -> int:
    """Write the datums :func:`to_pytrio_datums` makes of ``samples`` to a datum file
    (``rollout/trainers/jsonl/datums.py``), each line naming its sample and carrying its
    loss mask and collection record, so ``agentenvs check`` can check what PyTRIO will
    train on."""
    datums = to_pytrio_datums(samples, ignore_masked_targets=ignore_masked_targets)
    lines = (
        datum_line(
            "pytrio",
            [token for chunk in datum.model_input.chunks for token in chunk.tokens],
            {name: list(tensor.data) for name, tensor in datum.loss_fn_inputs.items()},
            sample,
            extra,
        )
        for datum, sample in zip(datums, samples, strict=True)
    )
    return write_datums_jsonl(lines, path)
