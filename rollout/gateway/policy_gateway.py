"""Gateway sessions sampled by a policy, and each finished session stored as a group.

A session (one episode of a harness) opens on its first request and holds its segment
tree. Each turn is sampled by the policy through the collector's own
:func:`~agentenvs.rollout.collect.turns.sample_action` (so the output is checked, and a
seeded policy gets a seed per session and turn), then recorded. Finishing a session
(``POST /s/{key}/finish``, or :meth:`PolicyGateway.finish`) stores it as one group of
one trajectory: its turns segment by segment, each turn's segment, parent and shared
prefix in its logs, the episode's reward as the group reward. Every segment is one
training sample (``rollout/data/samples.py`` splits at the breaks the logs name), and
``agentenvs check`` verifies links, prefixes and that every sampled token was delivered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.harness.conversation import Reply, RequestError
from agentenvs.envs.harness.replies import ReplyReader, sniff_format
from agentenvs.envs.harness.segments import SegmentTree, TreeOptions, Turn, session_renderer
from agentenvs.envs.harness.server import GatewaySession
from agentenvs.envs.tool_calls import CallFormat
from agentenvs.envs.types import (
    Env,
    EnvGroupBuilder,
    GroupDescription,
    StopReason,
    Trajectory,
    TrajectoryGroup,
    stop_metric,
)
from agentenvs.rollout.collect.finish import RecordStamps
from agentenvs.rollout.collect.plan import PlannedGroup, collection_identity
from agentenvs.rollout.collect.provenance import RunProvenance
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.collect.turns import sample_action
from agentenvs.rollout.policies.base import Policy, TurnSlot, is_per_env

ENV_NAME = "gateway"


@dataclass(frozen=True)
class GatewayOptions:
    """What every session of one gateway shares."""

    tokenizer: Any
    tool_format: CallFormat | None = None
    """The template's tool-call format; None: told from the chat template."""
    model_name: str = "agentenvs"
    max_context: int | None = None
    max_tokens: int | None = 2048
    store: TrajectoryStore | None = None

    def tree_options(self) -> TreeOptions:
        return TreeOptions(self.max_context, self.max_tokens, self.model_name)

    def config(self, tool_format: CallFormat | None) -> dict[str, Any]:
        """What the records name as the environment's configuration."""
        return {
            "tool_format": None if tool_format is None else str(tool_format),
            "max_context": self.max_context,
            "max_tokens": self.max_tokens,
            "model_name": self.model_name,
        }


class PolicyRunner:
    """A :class:`~agentenvs.envs.harness.server.TurnRunner` that samples from a policy."""

    def __init__(self, policy: Policy, key: str) -> None:
        self.policy = policy
        self.key = key

    async def run(self, tree: SegmentTree, turn: Turn) -> Reply:
        slot = TurnSlot(self.key, 0, turn.serial)
        action = await sample_action(
            self.policy, turn.tokens, turn.stop, slot=slot, max_tokens=turn.max_tokens
        )
        return tree.complete(turn, action)


@dataclass
class _Described(EnvGroupBuilder):
    """What a stored gateway session says of itself (the records' env and config)."""

    description: GroupDescription = field(default_factory=GroupDescription)

    async def make_envs(self) -> Sequence[Env]:  # never run: sessions are not built
        return []

    def describe(self) -> GroupDescription:
        return self.description


class PolicyGateway:
    """The sessions of one gateway, sampled by ``policy`` (a :class:`SessionSource`)."""

    def __init__(self, policy: Policy, options: GatewayOptions) -> None:
        if is_per_env(policy):
            raise ValueError(
                "the gateway needs a policy that samples from tokens alone; a per-env policy "
                "(scripted, replay) needs an environment, which a harness session is not"
            )
        self.policy = policy
        self.options = options
        template = getattr(options.tokenizer, "chat_template", None)
        self.tool_format = options.tool_format or sniff_format(template)
        self.sessions: dict[str, GatewaySession] = {}
        self.finished: set[str] = set()
        self.description = GroupDescription(
            env_name=ENV_NAME,
            config=options.config(self.tool_format),
            group_size=1,
            tokenizer=options.tokenizer,
            renderer="chat",
            protocol="gateway",
            tool_format=None if self.tool_format is None else str(self.tool_format),
        )
        # Provenance as the collector records it: from the description and the policy's
        # own (refreshed from the policy as each session is stored).
        identity = collection_identity(self.description, policy)
        self.stamps = RecordStamps(identity, RunProvenance(policy))
        self._serial = 0
        self._lock = asyncio.Lock()

    @property
    def model_name(self) -> str:
        return self.options.model_name

    def session(self, key: str | None) -> GatewaySession:
        if not key:
            raise RequestError(
                "name the session: a base URL ending in /s/<episode>/v1 (or /s/<episode> for "
                "Anthropic clients), or the X-Agentenvs-Session header",
                status=404,
            )
        if key in self.finished:
            raise RequestError(f"session {key!r} is finished; start a new one", status=409)
        found = self.sessions.get(key)
        if found is None:
            renderer = session_renderer(self.options.tokenizer)
            reader = ReplyReader(renderer, self.tool_format)
            tree = SegmentTree(renderer, reader, key=key, options=self.options.tree_options())
            found = self.sessions[key] = GatewaySession(key, tree, PolicyRunner(self.policy, key))
        return found

    def group(self, key: str, reward: float) -> TrajectoryGroup:
        """The session as a group of one trajectory (its turns segment by segment)."""
        session = self.sessions[key]
        transitions = session.tree.transitions()
        if not transitions:
            raise RequestError(f"session {key!r} has no finished turn to store", status=409)
        # The harness said it was done: one ending, as every episode names its stop reason.
        transitions[-1].metrics[stop_metric(StopReason.COMPLETED)] = 1
        trajectory = Trajectory(transitions, [], StopReason.COMPLETED)
        return TrajectoryGroup([trajectory], [float(reward)], [{}], tags=[ENV_NAME])

    async def finish(self, key: str, reward: float = 0.0) -> GroupRecord:
        """Close session ``key``: its record, stamped like a collected group and
        appended to the store when there is one."""
        async with self._lock:
            if key not in self.sessions:
                raise RequestError(f"no session {key!r}", status=404)
            pending = [t for t in self.sessions[key].tree.turns if t.completion is None]
            if pending:
                raise RequestError(
                    f"session {key!r} has {len(pending)} turn(s) still sampling", status=409
                )
            group = self.group(key, reward)
            record = GroupRecord(key=key, env=ENV_NAME, task_id=key, group=group)
            planned = PlannedGroup(
                self._serial, key, _Described(self.description), self.description
            )
            self._serial += 1
            self.stamps.finish(record, planned, self.policy)
            if self.options.store is not None:
                await self.options.store.commit(record)
            del self.sessions[key]
            self.finished.add(key)
            return record

    async def finish_all(self) -> list[GroupRecord]:
        """Every open session with a finished turn stored (reward 0): a gateway shutting
        down keeps what was sampled."""
        records = []
        for key in list(self.sessions):
            tree = self.sessions[key].tree
            if tree.done and all(t.completion is not None for t in tree.turns):
                records.append(await self.finish(key))
        return records
