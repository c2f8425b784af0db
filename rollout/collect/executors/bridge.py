"""Actors calling back to a policy that lives in the driver (a Hugging Face model, say).

A model loaded in the driver cannot be copied into every actor, so actors send
each turn's context to a small *mailbox* actor and wait; the driver takes the
requests from the mailbox in batches, samples them with its own policy (each
with the turn's :class:`TurnSlot`, so per-sample seeds stay what they are in
process) and posts the answers back. The driver only answers, it is never
called, which is the one direction a Ray driver can serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

from agentenvs.envs.types import StopCondition, TokensWithLogprobs
from agentenvs.rollout.collect.executors.wire import pack_action, token_array, unpack_action
from agentenvs.rollout.policies.base import Policy, PolicyError, TurnSlot, current_turn


class PolicyMailbox:
    """The rendezvous: a Ray async actor (see :func:`mailbox_actor`)."""

    def __init__(self) -> None:
        self._requests: asyncio.Queue[tuple[int, Any, Any, Any, Any]] = asyncio.Queue()
        self._waiting: dict[int, asyncio.Future] = {}
        self._ids = itertools.count()

    async def sample(
        self, observation: Any, stop: StopCondition, max_tokens: int | None, slot: TurnSlot | None
    ) -> dict[str, Any]:
        request_id = next(self._ids)
        answer = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        self._requests.put_nowait((request_id, observation, stop, max_tokens, slot))
        try:
            return await answer
        finally:
            self._waiting.pop(request_id, None)

    async def take(self, limit: int) -> list[tuple[int, Any, Any, Any, Any]]:
        """Wait for at least one request, then return up to ``limit`` of them."""
        batch = [await self._requests.get()]
        while len(batch) < limit and not self._requests.empty():
            batch.append(self._requests.get_nowait())
        return batch

    async def where(self) -> str:
        """The id of the node this mailbox runs on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    async def answer(self, request_id: int, packed: dict[str, Any]) -> None:
        waiting = self._waiting.get(request_id)
        if waiting is not None and not waiting.done():
            waiting.set_result(packed)


def mailbox_actor() -> Any:
    """A new mailbox actor, pinned to the driver's node (it is tiny: no CPU reserved).

    The pin is hard: Ray's *soft* node affinity placed a zero-CPU actor on any node
    (measured on a loopback cluster: 7 of 8 landed off the driver's node), and a
    mailbox on a worker node dies with that node, failing every group's next turn.
    The driver's node lives as long as the driver does."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    remote = ray.remote(PolicyMailbox)
    return remote.options(
        num_cpus=0,
        max_concurrency=100_000,
        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
    ).remote()


class BridgedPolicy:
    """What an actor's episodes see as their policy: every turn goes to the mailbox."""

    def __init__(self, mailbox: Any) -> None:
        self.mailbox = mailbox

    async def __call__(
        self, observation: list[int], stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        packed = await self.mailbox.sample.remote(
            token_array(list(observation)), stop, max_tokens, current_turn.get()
        )
        if "error" in packed:
            raise PolicyError(packed["error"])
        return unpack_action(packed)


class DriverPump:
    """The driver's side: answers the mailbox's requests with the driver's policy."""

    def __init__(self, policy: Policy, batch: int = 256) -> None:
        self.policy = policy
        self.batch = batch
        self.mailbox = mailbox_actor()
        self._task: asyncio.Task | None = None
        self._answering: set[asyncio.Task] = set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        while True:
            for request in await self.mailbox.take.remote(self.batch):
                task = asyncio.create_task(self._answer(*request))
                self._answering.add(task)
                task.add_done_callback(self._answering.discard)

    async def _answer(
        self,
        request_id: int,
        observation: Any,
        stop: StopCondition,
        max_tokens: int | None,
        slot: TurnSlot | None,
    ) -> None:
        from agentenvs.rollout.collect.attempts import describe_error
        from agentenvs.rollout.collect.turns import check_policy_output

        token = current_turn.set(slot)
        try:
            output = await self.policy(observation.tolist(), stop, max_tokens=max_tokens)
            packed = pack_action(check_policy_output(output, max_tokens))
        except PolicyError as err:  # the actor's episode raises it, as in process
            packed = {"error": str(err)}
        except Exception as err:  # a bug in the policy: named, and raised as a PolicyError there
            packed = {"error": describe_error(err)}
        finally:
            current_turn.reset(token)
        await self.mailbox.answer.remote(request_id, packed)

    async def close(self) -> None:
        import ray

        tasks = [t for t in (self._task, *self._answering) if t is not None]
        for task in tasks:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            ray.kill(self.mailbox)
