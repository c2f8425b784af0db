"""Small pieces the trainer adapters share."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
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
