"""Actors calling back to a policy that lives in the driver (a Hugging Face model, say).

A model loaded in the driver cannot be copied into every actor, so actors send
each turn's context to a small *mailbox* actor and wait; the driver takes the
requests from the mailbox in batches, samples them with its own policy (each
with the turn's :class:`TurnSlot`, so per-sample seeds stay what they are in
process) and posts the answers back. The driver only answers, it is never
called, which is the one direction a Ray driver can serve.

At scale the driver's Ray calls were the bottleneck (one ``answer`` call per turn:
~470 turns/s). So answers are batched (every answer ready in one turn of the
driver's event loop goes back in one ``answer_many`` call per mailbox) and the
mailbox is sharded (``shards`` mailbox actors, each its own process and queue;
actors spread their turns over them round-robin), so neither the driver's calls
nor one mailbox's event loop caps the fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from dataclasses import dataclass, field
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
        self._origin: dict[int, tuple[str, int]] = {}
        """Request id -> (client, the client's own id) for requests sent by :meth:`submit`."""
        self._outboxes: dict[str, _Outbox] = {}

    async def submit(self, client: str, requests: list[tuple[int, Any, Any, Any, Any]]) -> None:
        """Queue a client's batch of turns (``(its id, observation, stop, max_tokens,
        slot)``); their answers are fetched with :meth:`collect`."""
        for client_id, observation, stop, max_tokens, slot in requests:
            request_id = next(self._ids)
            self._origin[request_id] = (client, client_id)
            self._requests.put_nowait((request_id, observation, stop, max_tokens, slot))

    async def collect(self, client: str) -> list[tuple[int, dict[str, Any]]]:
        """Wait for at least one answer for ``client``, then return all it has."""
        box = self._outboxes.setdefault(client, _Outbox())
        while not box.answers:
            box.ready.clear()
            await box.ready.wait()
        answers, box.answers = box.answers, []
        return answers

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
        origin = self._origin.pop(request_id, None)
        if origin is not None:
            box = self._outboxes.setdefault(origin[0], _Outbox())
            box.answers.append((origin[1], packed))
            box.ready.set()
            return
        waiting = self._waiting.get(request_id)
        if waiting is not None and not waiting.done():
            waiting.set_result(packed)

    async def answer_many(self, answers: list[tuple[int, dict[str, Any]]]) -> None:
        """Several answers in one call (what the driver sends)."""
        for request_id, packed in answers:
            await self.answer(request_id, packed)


@dataclass
class _Outbox:
    answers: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    ready: asyncio.Event = field(default_factory=asyncio.Event)


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


class MailboxClient:
    """One actor's line to one mailbox: its episodes' turns go out batched.

    Every turn asked in one turn of the actor's event loop goes in one ``submit``
    call, and turns asked while a ``submit`` is in flight go in the next one when it
    returns (one in flight at a time: the busier the line, the bigger the batch).
    One ``collect`` call in flight at a time brings back every answer the mailbox
    holds for this client, so an actor running hundreds of episodes makes a few Ray
    calls per batch of turns, not one per turn."""

    def __init__(self, mailbox: Any) -> None:
        self.mailbox = mailbox
        self.client = uuid.uuid4().hex
        self._ids = itertools.count()
        self._outgoing: list[tuple[int, Any, Any, Any, Any]] = []
        self._waiting: dict[int, asyncio.Future] = {}
        self._collector: asyncio.Task | None = None
        self._sending: asyncio.Future | None = None

    async def ask(
        self, observation: Any, stop: StopCondition, max_tokens: int | None, slot: Any
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        client_id = next(self._ids)
        answer = loop.create_future()
        self._waiting[client_id] = answer
        self._outgoing.append((client_id, observation, stop, max_tokens, slot))
        if len(self._outgoing) == 1:
            loop.call_soon(self._send)
        if self._collector is None:
            self._collector = loop.create_task(self._collect())
        try:
            return await answer
        finally:
            self._waiting.pop(client_id, None)

    def _send(self) -> None:
        if self._sending is not None:
            return  # the call in flight sends what gathered when it returns
        batch, self._outgoing = self._outgoing, []
        if not batch:
            return
        self._sending = asyncio.ensure_future(self.mailbox.submit.remote(self.client, batch))
        self._sending.add_done_callback(lambda call: self._sent(call, [b[0] for b in batch]))

    def _sent(self, call: asyncio.Future, client_ids: list[int]) -> None:
        self._sending = None
        self._failed(call, client_ids)
        self._send()

    def _failed(self, call: asyncio.Future, client_ids: list[int]) -> None:
        error = None if call.cancelled() else call.exception()
        if error is None:
            return
        for client_id in client_ids:  # the mailbox is gone: those turns fail as one would
            waiting = self._waiting.get(client_id)
            if waiting is not None and not waiting.done():
                waiting.set_exception(error)

    async def _collect(self) -> None:
        try:
            while self._waiting:
                for client_id, packed in await self.mailbox.collect.remote(self.client):
                    waiting = self._waiting.pop(client_id, None)  # none left: no more polls
                    if waiting is not None and not waiting.done():
                        waiting.set_result(packed)
        except Exception as err:  # the mailbox died: every waiting turn fails with it
            for waiting in self._waiting.values():
                if not waiting.done():
                    waiting.set_exception(err)
        finally:
            self._collector = None


class BridgedPolicy:
    """What an actor's episodes see as their policy: every turn goes to a mailbox,
    the shards taken in turn (``mailboxes``: one handle or a list of them).

    The shard changes per turn of the actor's event loop, not per call: turns asked
    together go to one shard, are answered together and come back together, so a
    batch stays whole from turn to turn. Sent round-robin per call, each batch was
    split over the shards at every turn and batches shrank to 1-2 turns per call."""

    def __init__(self, mailboxes: Any) -> None:
        handles = list(mailboxes) if isinstance(mailboxes, list | tuple) else [mailboxes]
        self.clients = [MailboxClient(handle) for handle in handles]
        self._next = itertools.count()
        self._current: MailboxClient | None = None

    def _client(self) -> MailboxClient:
        if self._current is None:
            self._current = self.clients[next(self._next) % len(self.clients)]
            asyncio.get_running_loop().call_soon(self._next_shard)
        return self._current

    def _next_shard(self) -> None:
        self._current = None

    async def __call__(
        self, observation: list[int], stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        client = self._client()
        packed = await client.ask(
            token_array(list(observation)), stop, max_tokens, current_turn.get()
        )
        if "error" in packed:
            raise PolicyError(packed["error"])
        return unpack_action(packed)


class DriverPump:
    """The driver's side: answers the mailboxes' requests with the driver's policy.

    ``mailbox`` is what actors are given (the list of shard handles)."""

    def __init__(self, policy: Policy, batch: int = 256, shards: int = 2) -> None:
        self.policy = policy
        self.batch = batch
        self.mailboxes = [mailbox_actor() for _ in range(max(1, shards))]
        self.mailbox = list(self.mailboxes)
        self.answer_calls = 0
        """``answer_many`` calls made: turns answered per call is the batching."""
        self.taken = [0] * len(self.mailboxes)
        """Requests taken from each shard."""
        self._tasks: list[asyncio.Task] = []
        self._answering: set[asyncio.Task] = set()
        self._ready: dict[int, list[tuple[int, dict[str, Any]]]] = {}
        self._sending: dict[int, asyncio.Future] = {}
        """Each shard's ``answer_many`` in flight (one at a time)."""
        self._closed = False

    def start(self) -> None:
        if not self._tasks:
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._pump(i)) for i in range(len(self.mailboxes))]

    async def _pump(self, shard: int) -> None:
        mailbox = self.mailboxes[shard]
        while True:
            requests = await mailbox.take.remote(self.batch)
            self.taken[shard] += len(requests)
            for request in requests:
                task = asyncio.create_task(self._answer(*request, shard=shard))
                self._answering.add(task)
                task.add_done_callback(self._answering.discard)

    def _post(self, shard: int, request_id: int, packed: dict[str, Any]) -> None:
        """Queue an answer; the first of a loop turn schedules the shard's flush,
        unless the shard's last flush is in flight (it flushes these when it returns)."""
        ready = self._ready.setdefault(shard, [])
        ready.append((request_id, packed))
        if len(ready) == 1 and shard not in self._sending:
            asyncio.get_running_loop().call_soon(self._flush, shard)

    def _flush(self, shard: int) -> None:
        if self._closed or shard in self._sending:
            return
        answers = self._ready.pop(shard, [])
        if answers:
            self.answer_calls += 1
            call = asyncio.ensure_future(self.mailboxes[shard].answer_many.remote(answers))
            self._sending[shard] = call
            call.add_done_callback(lambda done: self._flushed(shard, done))

    def _flushed(self, shard: int, call: asyncio.Future) -> None:
        self._sending.pop(shard, None)
        if not call.cancelled():
            call.exception()  # a dead mailbox: its actors' turns fail on their side
        self._flush(shard)

    async def _answer(
        self,
        request_id: int,
        observation: Any,
        stop: StopCondition,
        max_tokens: int | None,
        slot: TurnSlot | None,
        *,
        shard: int = 0,
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
        self._post(shard, request_id, packed)

    async def close(self) -> None:
        import ray

        self._closed = True
        tasks = [*self._tasks, *self._answering, *self._sending.values()]
        for task in tasks:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)
        for mailbox in self.mailboxes:
            with contextlib.suppress(Exception):
                ray.kill(mailbox)
