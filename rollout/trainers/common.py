"""Small pieces the trainer adapters share."""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from agentenvs.envs.types import Trajectory
from agentenvs.rollout.data.samples import TrainingSample, trajectory_to_samples

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous trainer code.

    Trainers call their rollout hooks synchronously. Without a running event
    loop this is ``asyncio.run``; inside one (a notebook, say) the coroutine runs
    on a fresh loop in a helper thread, since the caller's loop is blocked on us.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coro)
        except BaseException as error:
            result["error"] = error

    thread = threading.Thread(target=target, name="agentenvs-rollout", daemon=True)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def one_sample(traj: Trajectory) -> tuple[TrainingSample, int]:
    """The single training sequence of a trajectory, for trainers that take one per rollout.

    TRL and verl train on exactly one (prompt, completion) pair per rollout. A
    trajectory whose observations always extend the context is one sample
    already. When a chat template rewrote earlier turns the trajectory splits
    into several samples (see :mod:`agentenvs.rollout.data.samples`); then the last one
    is kept, because it holds the final answer the reward judged, and the number
    of samples left out is returned so callers can report it. (The Tinker and
    PyTRIO hand-offs keep every sample.)
    """
    samples = trajectory_to_samples(traj, 0.0)
    if not samples:
        raise ValueError("the trajectory has no tokens (no observation and no action)")
    return samples[-1], len(samples) - 1


class MissingLogprobsWarning(UserWarning):
    """Samples reach a loss that reads the sampler's logprobs, but their policy gave none."""


def warn_missing_logprobs(samples: Sequence[TrainingSample], where: str) -> int:
    """Warn, once per call, when some ``samples`` have no sampler logprobs; return how many.

    A policy without logprobs (the scripted oracle, a replayed text) leaves 0.0 on its
    tokens and ``has_logprobs=False`` on the sample. A loss with an importance ratio
    (Tinker's and PyTRIO's ``importance_sampling``/``ppo``, TRL's vLLM correction)
    would read 0.0 as "the sampler gave this token probability 1" and train on a
    made-up ratio without any error, so ``where`` (the hand-off) says so out loud.
    """
    missing = [s for s in samples if not s.has_logprobs]
    if missing:
        first = missing[0]
        warn_no_logprobs(
            where,
            f"{len(missing)} of {len(samples)} samples have no sampler logprobs (first: group "
            f"{first.group_index} trajectory {first.traj_index} sample {first.sample_index})",
            stacklevel=4,
        )
    return len(missing)


def warn_no_logprobs(where: str, what: str, *, stacklevel: int = 3) -> None:
    """The :class:`MissingLogprobsWarning` for ``what`` (which samples or actions) at ``where``,
    pointing at the caller of the hand-off (``stacklevel`` counts from here)."""
    warnings.warn(
        f"{where}: {what}, from a policy without logprobs such as the scripted one; "
        "0.0 stands in for each, which an importance ratio reads as probability 1. "
        "Use a loss that does not read the sampler's logprobs, or recompute them with the model.",
        MissingLogprobsWarning,
        stacklevel=stacklevel,
    )
