"""Tree rollouts: fork live episodes mid-way and sample K continuations from each fork.

A group's envs are the *roots*. Each root runs like an ordinary episode until a
branch point, where its env is forked K-1 times (:meth:`Env.fork`); the original and
its forks are the K children, which continue independently and may branch again.
Every path ends in one *leaf*, a complete trajectory, so a group of R roots gives
``leaves`` trajectories that share their prefixes up to their branch points.

Two schedules say where to branch (they combine):

* fixed: before the policy's t-th action for each t in ``branch_at`` (turns count
  from 1, so ``branch_at=(1,)`` shares only the reset and the prompt);
* entropy-triggered, as in ARPO (Dong et al. 2025): after an observation (turn 2 on),
  the next action is sampled first; when the mean negative logprob of its first
  ``entropy_tokens`` tokens (the sampler's logprobs, a one-sample estimate of the
  token entropy) exceeds ``entropy_threshold``, the env is forked *before* that
  action is played: the original plays it, the forks sample their own.

``max_leaves`` caps the leaves per group (a branch point gets fewer children when
the cap is near) and the :class:`~agentenvs.rollout.collect.fork_ledger.ForkLedger`
bounds the forks open at once, counts them and records their failures.

The group comes back as a :class:`TreeGroup`: its trajectories are the leaves, in
(root, path) order, and ``tree`` describes them (see :func:`tree_record`): each
leaf's path of child indices, the turn of each branch point on it, its parent leaf
and the branch turn where it left that parent. Up to its branch turn a leaf equals
its parent token for token (the same transitions, then the same observation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.types import (
    Env,
    EnvGroupBuilder,
    GroupDescription,
    Metrics,
    StopCondition,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
)
from agentenvs.rollout.collect.env_code import env_call
from agentenvs.rollout.collect.fork_ledger import ForkLedger
from agentenvs.rollout.collect.rollouts import (
    RolloutSlot,
    current_group_key,
    make_group_envs,
    policy_in_slot,
    run_concurrently,
    score_group,
)
from agentenvs.rollout.collect.turns import finished_trajectory, play_action, sample_action
from agentenvs.rollout.policies.base import Policy, PolicyFactory, TurnSlot

TREE_FORMAT = 1


@dataclass(frozen=True)
class BranchSchedule:
    """Where a tree branches and how wide it may grow."""

    branch_at: tuple[int, ...] = ()
    branch_factor: int = 2
    max_leaves: int | None = None
    entropy_threshold: float | None = None
    """Mean negative logprob (nats) of the next action's first tokens that triggers a branch."""
    entropy_tokens: int = 8
    max_live_forks: int = 64

    def __post_init__(self) -> None:
        if self.branch_factor < 2:
            raise ValueError(f"branch_factor must be at least 2, got {self.branch_factor}")
        if any(t < 1 for t in self.branch_at):
            raise ValueError(f"branch_at turns count from 1, got {list(self.branch_at)}")
        if self.max_leaves is not None and self.max_leaves < 1:
            raise ValueError(f"max_leaves must be at least 1, got {self.max_leaves}")
        if self.entropy_threshold is not None and self.entropy_threshold < 0:
            raise ValueError(f"entropy_threshold must be 0 or more, got {self.entropy_threshold}")
        if self.entropy_tokens < 1:
            raise ValueError(f"entropy_tokens must be at least 1, got {self.entropy_tokens}")
        if self.max_live_forks < 1:
            raise ValueError(f"max_live_forks must be at least 1, got {self.max_live_forks}")

    @property
    def branches(self) -> bool:
        return bool(self.branch_at) or self.entropy_threshold is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "branch_at": list(self.branch_at),
            "branch_factor": self.branch_factor,
            "max_leaves": self.max_leaves,
            "entropy_threshold": self.entropy_threshold,
            "entropy_tokens": self.entropy_tokens,
            "max_live_forks": self.max_live_forks,
        }

    def uncertainty(self, action: TokensWithLogprobs) -> float | None:
        """Mean negative logprob of the action's first tokens (None without logprobs)."""
        if not action.logprobs:
            return None
        head = action.logprobs[: self.entropy_tokens]
        return -sum(head) / len(head)


@dataclass
class TreeGroup(TrajectoryGroup):
    """A group whose trajectories are the leaves of trees; ``tree`` says how they relate."""

    tree: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Branch:
    """One live path of a tree: its env, its policy and what it has done so far."""

    env: Env
    policy: Policy
    root: int
    lane: int
    """Unique per path in the group: the trajectory slot its policy samples as."""
    observation: list[int]
    stop: StopCondition
    transitions: list[Transition] = field(default_factory=list)
    path: tuple[int, ...] = ()
    branch_turns: tuple[int, ...] = ()
    triggers: tuple[str, ...] = ()
    uncertainties: tuple[float | None, ...] = ()


@dataclass
class _Leaf:
    branch: _Branch
    trajectory: Trajectory


class _TreeRun:
    """The branching of one group (see the module docstring)."""

    def __init__(
        self, schedule: BranchSchedule, policy: Policy | PolicyFactory, group_key: str | None
    ) -> None:
        self.schedule = schedule
        self.policy = policy
        self.group_key = group_key
        self.ledger = ForkLedger(schedule.max_live_forks)
        self.leaves: list[_Leaf] = []
        self.paths = 0
        """Live paths plus finished leaves: the leaves this tree will have."""
        self.capped = 0
        """Branch points that got fewer children (or none) because of ``max_leaves``."""

    def policy_for(self, env: Env, lane: int) -> Policy:
        return policy_in_slot(self.policy, env, RolloutSlot(self.group_key, lane))

    async def start(self, root: int, env: Env) -> _Branch:
        observation, stop = await env_call(env.initial_observation(), env, "initial_observation")
        self.paths += 1
        lane = self.paths - 1
        return _Branch(env, self.policy_for(env, lane), root, lane, list(observation), stop)

    async def sample(self, branch: _Branch) -> TokensWithLogprobs:
        slot = TurnSlot(self.group_key, branch.lane, len(branch.transitions))
        return await sample_action(
            branch.policy,
            branch.observation,
            branch.stop,
            slot=slot,
            max_tokens=branch.env.max_action_tokens(),
        )

    def children_allowed(self) -> int:
        """How many children a branch point may have now (1 means: do not branch)."""
        factor = self.schedule.branch_factor
        cap = self.schedule.max_leaves
        if cap is None:
            return factor
        allowed = max(1, min(factor, 1 + cap - self.paths))
        if allowed < factor:
            self.capped += 1
        return allowed

    async def fork_children(
        self, branch: _Branch, trigger: str, uncertainty: float | None
    ) -> list[_Branch]:
        """Fork ``branch`` into children; it becomes child 0. [] when nothing forked."""
        turn = len(branch.transitions) + 1
        wanted = self.children_allowed()
        forks: list[Env] = []
        for _ in range(wanted - 1):
            clone = await self.ledger.fork(branch.env)
            if clone is not None:
                forks.append(clone)
        if not forks:
            return []
        children = []
        for index, env in enumerate(forks, start=1):
            self.paths += 1
            lane = self.paths - 1
            children.append(
                _Branch(
                    env,
                    self.policy_for(env, lane),
                    branch.root,
                    lane,
                    list(branch.observation),
                    list(branch.stop),
                    list(branch.transitions),
                    (*branch.path, index),
                    (*branch.branch_turns, turn),
                    (*branch.triggers, trigger),
                    (*branch.uncertainties, uncertainty),
                )
            )
        branch.path += (0,)
        branch.branch_turns += (turn,)
        branch.triggers += (trigger,)
        branch.uncertainties += (uncertainty,)
        return children

    async def grow(self, branch: _Branch, presampled: TokensWithLogprobs | None = None) -> None:
        """Run one path to its end, splitting it at every branch point it meets."""
        schedule = self.schedule
        while True:
            turn = len(branch.transitions) + 1
            fresh = not branch.branch_turns or branch.branch_turns[-1] != turn
            action = presampled
            presampled = None
            children: list[_Branch] = []
            if action is None and fresh and turn in schedule.branch_at:
                children = await self.fork_children(branch, "fixed", None)
            if not children and action is None:
                action = await self.sample(branch)
                threshold = schedule.entropy_threshold
                if threshold is not None and fresh and turn >= 2:
                    score = schedule.uncertainty(action)
                    if score is not None and score > threshold:
                        children = await self.fork_children(branch, "entropy", score)
            if children:
                await run_concurrently(
                    [self.grow(branch, action), *(self.grow(child) for child in children)]
                )
                return
            assert action is not None
            if await self.play(branch, action):
                return

    async def play(self, branch: _Branch, action: TokensWithLogprobs) -> bool:
        """Step the env with ``action``; True when the episode ended (a leaf is made)."""
        transition, step = await play_action(branch.env, branch.observation, action)
        branch.transitions.append(transition)
        if not step.episode_done:
            branch.observation, branch.stop = list(step.next_observation), step.next_stop_condition
            return False
        self.leaves.append(_Leaf(branch, finished_trajectory(branch.transitions, step)))
        await self.ledger.release(branch.env)
        return True


def _parent_of(path: tuple[int, ...], index_of: dict[tuple[int, ...], int]) -> tuple[int, int]:
    """(depth of the last branch where this path was not the first child, parent leaf)."""
    depth = max(d for d, child in enumerate(path) if child != 0)
    stem = (*path[:depth], 0)
    # The parent continued the forked env: first child at every later branch point.
    for candidate, leaf_index in index_of.items():
        if candidate[: depth + 1] == stem and all(c == 0 for c in candidate[depth + 1 :]):
            return depth, leaf_index
    raise AssertionError(f"no parent leaf for path {path}")


def tree_record(
    leaves: Sequence[tuple[int, tuple[int, ...], tuple[int, ...], tuple[str, ...], int]],
    *,
    roots: int,
    schedule: BranchSchedule,
    ledger: ForkLedger,
    capped: int,
) -> dict[str, Any]:
    """The JSON ``tree`` of a group: ``leaves[i]`` describes trajectory ``i``.

    Each leaf: ``root``; ``path`` (child index at each branch point on the way);
    ``branch_turns`` (the turn of each of those branch points); ``triggers``;
    ``parent`` (the leaf that continued the env this leaf's was forked from; None for
    the first leaf of a root) and ``branch_turn`` (the turn at which it left its
    parent: transitions before it and that turn's observation are the parent's).
    """
    described = []
    for root in range(roots):
        mine = [(i, leaf) for i, leaf in enumerate(leaves) if leaf[0] == root]
        index_of = {leaf[1]: i for i, leaf in mine}
        for i, (_, path, turns, triggers, turns_played) in mine:
            parent = branch_turn = None
            if any(path):
                depth, parent = _parent_of(path, index_of)
                branch_turn = turns[depth]
            described.append(
                (
                    i,
                    {
                        "root": root,
                        "path": list(path),
                        "branch_turns": list(turns),
                        "triggers": list(triggers),
                        "parent": parent,
                        "branch_turn": branch_turn,
                        "turns": turns_played,
                    },
                )
            )
    described.sort(key=lambda item: item[0])
    branch_points = {(leaf[0], leaf[1][:depth]) for leaf in leaves for depth in range(len(leaf[1]))}
    return {
        "format": TREE_FORMAT,
        "schedule": schedule.to_json(),
        "roots": roots,
        "leaves": [item for _, item in described],
        "branch_points": len(branch_points),
        "leaf_cap_hits": capped,
        **ledger.to_json(),
    }


async def do_tree_rollout(
    builder: EnvGroupBuilder, policy: Policy | PolicyFactory, schedule: BranchSchedule
) -> TreeGroup:
    """Make the group's root envs, grow a tree from each, score the leaves as a group.

    Cleanup is always complete: every fork is closed by the ledger, the roots by
    ``builder.cleanup()``, on success, failure and cancellation alike.
    """
    run = _TreeRun(schedule, policy, current_group_key.get())
    try:
        roots = await make_group_envs(builder)
        branches = [await run.start(i, env) for i, env in enumerate(roots)]
        await run_concurrently([run.grow(branch) for branch in branches])
        run.leaves.sort(key=lambda leaf: (leaf.branch.root, leaf.branch.path))
        trajectories = [leaf.trajectory for leaf in run.leaves]
        envs = [leaf.branch.env for leaf in run.leaves]
        scored = await score_group(builder, trajectories, envs, noun="leaves")
        described = [
            (
                leaf.branch.root,
                leaf.branch.path,
                leaf.branch.branch_turns,
                leaf.branch.triggers,
                len(leaf.trajectory.transitions),
            )
            for leaf in run.leaves
        ]
        tree = tree_record(
            described, roots=len(roots), schedule=schedule, ledger=run.ledger, capped=run.capped
        )
        return TreeGroup(
            scored.trajectories, scored.group_rewards, scored.group_metrics, scored.tags, tree=tree
        )
    finally:
        await run.ledger.close_all()
        await builder.cleanup()


@dataclass
class TreeGroupBuilder(EnvGroupBuilder):
    """A builder whose group is rolled out as trees: it
    :class:`~agentenvs.envs.types.RunsOwnGroup`, and says of itself what its inner
    builder says (the records and the run identity read :meth:`describe`)."""

    inner: EnvGroupBuilder
    schedule: BranchSchedule

    async def make_envs(self) -> Sequence[Env]:
        return await self.inner.make_envs()

    async def compute_group_rewards(
        self, trajectories: list[Trajectory], envs: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        return await self.inner.compute_group_rewards(trajectories, envs)

    def logging_tags(self) -> list[str]:
        return self.inner.logging_tags()

    async def cleanup(self) -> None:
        await self.inner.cleanup()

    def describe(self) -> GroupDescription:
        return self.inner.describe()

    async def group_rollout(self, policy: Policy | PolicyFactory) -> TreeGroup:
        return await do_tree_rollout(self.inner, policy, self.schedule)


def as_trees(
    builders: Sequence[EnvGroupBuilder], schedule: BranchSchedule | None
) -> list[EnvGroupBuilder]:
    """The builders, each rolled out as trees under ``schedule`` (unchanged for None)."""
    if schedule is None:
        return list(builders)
    return [TreeGroupBuilder(builder, schedule) for builder in builders]


def attach_tree(extra: dict[str, Any], group: TrajectoryGroup | None) -> None:
    """Store a tree group's structure and its tree advantages (both estimators, named) in
    its record's ``extra``: the collector's one hook."""
    from agentenvs.rollout.data.tree_advantages import tree_advantage_record

    if isinstance(group, TreeGroup) and group.tree:
        extra["tree"] = group.tree
        extra["tree_advantages"] = tree_advantage_record(group, group.tree)


def tree_summary(records: Sequence[Any], schedule: BranchSchedule | None = None) -> dict[str, int]:
    """Leaves, forks and fork failures over ok records, for the CLI summary ({} for a run
    without trees: its summary reads as before)."""
    if schedule is None:
        return {}
    trees = [r.extra.get("tree") for r in records if r.status == "ok"]
    trees = [t for t in trees if t]
    return {
        "leaves": sum(len(t["leaves"]) for t in trees),
        "roots": sum(int(t["roots"]) for t in trees),
        "forks": sum(int(t["forks"]) for t in trees),
        "fork_failures": sum(int(t["fork_failures"]) for t in trees),
        "forks_refused": sum(int(t["forks_refused"]) for t in trees),
        "branch_points": sum(int(t["branch_points"]) for t in trees),
    }
