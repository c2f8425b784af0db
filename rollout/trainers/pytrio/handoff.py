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

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentenvs.rollout.data.samples import TrainingSample, gc_paused
from agentenvs.rollout.trainers.common import warn_missing_logprobs

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
