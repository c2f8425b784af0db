"""Two-way bridge with the Tinker cookbook's RL types (``tinker_cookbook.rl``).

agentenvs follows the cookbook's Env/EnvGroupBuilder pattern with plain token lists
instead of ``tinker.ModelInput``, so the adapters here only convert at the edges:

From agentenvs to the cookbook
    :class:`CookbookGroupBuilder` / :class:`CookbookDataset` make any agentenvs
    builder or dataset a cookbook ``EnvGroupBuilder`` / ``RLDataset``, which
    ``tinker_cookbook.rl.rollouts.do_group_rollout`` and
    ``tinker_cookbook.rl.data_processing.assemble_training_data`` use unchanged;
    :class:`AgentenvsDatasetBuilder` is the ``RLDatasetBuilder`` a cookbook
    ``rl.train.Config`` takes. :class:`PolicyCompleter` turns any agentenvs policy
    (scripted, replay, HF, OpenAI-compatible, PyTRIO) into a cookbook
    ``TokenCompleter``.

From the cookbook to agentenvs
    :class:`FromCookbookGroupBuilder` wraps a cookbook builder so this project's
    collector, store and viewer run it; :func:`collect_from_cookbook` does all of
    it and writes a file ``agentenvs view`` reads.

Per-turn stamps: under the cookbook's runner, :class:`PolicyCompleter` gives each
turn the same slot agentenvs' own rollout does (so a seeded server policy derives
the same per-turn seeds and a group's episodes differ), and the policy's stamp
(the seed, the verified weights that served the turn) lands in the cookbook
transition's ``logs`` under ``policy/...``, as in agentenvs' trajectories.
:func:`cookbook_provenance` names the policy, the served model and the oldest
weights version the group's turns record.

Stop reasons: Tinker's sampler reports ``stop`` (a stop sequence or EOS) or
``length``. agentenvs splits ``stop`` into ``stop`` and ``eos``; going in, an
action that ends with the environment's end-of-turn marker (or an EOS id given to
the adapter) is ``eos``; going out, ``eos`` becomes ``stop``.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chz
import tinker
from tinker_cookbook.completers import StopCondition as CookbookStopCondition
from tinker_cookbook.completers import TokenCompleter
from tinker_cookbook.completers import TokensWithLogprobs as CookbookTokens
from tinker_cookbook.rl import types as cookbook
from tinker_cookbook.rl.rollout_limits import RolloutLimits

from agentenvs.envs.types import (
    Action,
    ActionExtra,
    Env,
    EnvGroupBuilder,
    GroupDescription,
    Metrics,
    Observation,
    RLDataset,
    SamplerStopReason,
    StepResult,
    StopCondition,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
)
from agentenvs.rollout.collect.options import CollectOptions
from agentenvs.rollout.collect.rollouts import RolloutSlot, current_group_key, current_slot
from agentenvs.rollout.collect.turns import check_policy_output
from agentenvs.rollout.policies.base import (
    Policy,
    PolicyError,
    PolicyFactory,
    SelfDescribing,
    TurnSlot,
    current_turn,
    is_per_env,
    policy_for,
    turn_logs,
)
from agentenvs.rollout.trainers.common import warn_no_logprobs
from agentenvs.rollout.trainers.tinker.handoff import to_cookbook_group
from agentenvs.rollout.weights.stamps import with_turn_versions

logger = logging.getLogger(__name__)

# ---- stop reasons -----------------------------------------------------------------------------


def to_tinker_stop_reason(reason: SamplerStopReason) -> tinker.StopReason:
    """Ours to Tinker's: ``eos`` and ``stop`` are both ``stop`` there."""
    return "length" if reason == "length" else "stop"


def from_tinker_stop_reason(
    reason: str | None, action: Sequence[int], env: Env | None = None, eos_token_ids=()
) -> SamplerStopReason:
    """Tinker's stop reason to ours, telling EOS from a stop sequence by the action's end."""
    if reason == "length":
        return "length"
    if action and action[-1] in eos_token_ids:
        return "eos"
    renderer = getattr(env, "renderer", None)
    if renderer is not None and action:
        _, marker = renderer.split_action(list(action))
        if marker:
            return "eos"
    return "stop"


# ---- agentenvs -> cookbook ----------------------------------------------------------------------

_current_env: ContextVar[CookbookEnv | None] = ContextVar("agentenvs_cookbook_env", default=None)
"""The wrapped env whose episode the current asyncio task is running.

The cookbook runs each episode of a group in its own task and calls one shared
``TokenCompleter`` for all of them; :class:`CookbookEnv` records itself here when
its episode starts so a :class:`PolicyCompleter` can hand per-env policies
(scripted, replay) the env they belong to."""


class CookbookEnv(cookbook.Env):
    """One agentenvs :class:`Env` as a ``tinker_cookbook.rl.types.Env``.

    Observations become ``tinker.ModelInput`` (one text chunk); the sampler's stop
    reason from ``extra`` is mapped into ours. The env's per-turn token cap is
    advertised as ``rollout_limits`` so the cookbook's rollout runner passes it to
    the sampler exactly as agentenvs' own ``do_group_rollout`` does.
    """

    def __init__(self, env: Env, index: int = 0, eos_token_ids: Sequence[int] = ()) -> None:
        self.env = env
        self.index = index
        self.eos_token_ids = frozenset(eos_token_ids)
        self.turns = 0
        """Actions stepped so far: the turn number of the next one."""
        self.pending_logs: dict[str, Any] = {}
        """The ``policy/...`` stamp of the action the completer just returned, which
        the next :meth:`step` records (the cookbook's runner drops the stamp)."""

    @property
    def rollout_limits(self) -> RolloutLimits | None:
        cap = self.env.max_action_tokens()
        return RolloutLimits(max_turn_tokens=cap) if cap is not None else None

    async def initial_observation(self) -> tuple[tinker.ModelInput, CookbookStopCondition]:
        _current_env.set(self)
        ob, stop = await self.env.initial_observation()
        return tinker.ModelInput.from_ints(list(ob)), list(stop)

    async def step(
        self, action: cookbook.Action, *, extra: cookbook.ActionExtra | None = None
    ) -> cookbook.StepResult:
        reason = from_tinker_stop_reason(
            (extra or {}).get("stop_reason"), action, self.env, self.eos_token_ids
        )
        result = await self.env.step(list(action), extra={"stop_reason": reason})
        stamp, self.pending_logs = self.pending_logs, {}
        self.turns += 1
        return cookbook.StepResult(
            reward=result.reward,
            episode_done=result.episode_done,
            next_observation=tinker.ModelInput.from_ints(list(result.next_observation)),
            next_stop_condition=list(result.next_stop_condition),
            metrics=dict(result.metrics),
            logs={**result.logs, **stamp},
        )


def from_cookbook_trajectory(traj: cookbook.Trajectory) -> Trajectory:
    """A cookbook trajectory as ours (token lists; ``stop`` stays ``stop``)."""
    transitions = [
        Transition(
            ob=_ints(tr.ob),
            ac=TokensWithLogprobs(
                list(tr.ac.tokens),
                None if tr.ac.maybe_logprobs is None else list(tr.ac.maybe_logprobs),
                "length" if tr.ac.stop_reason == "length" else "stop",
            ),
            reward=float(tr.reward),
            episode_done=tr.episode_done,
            metrics=dict(tr.metrics),
            logs=dict(tr.logs),
        )
        for tr in traj.transitions
    ]
    return Trajectory(transitions, _ints(traj.final_ob), traj.stop_reason)


def from_cookbook_group(
    group: cookbook.TrajectoryGroup, tags: Sequence[str] = ()
) -> TrajectoryGroup:
    """A cookbook ``TrajectoryGroup`` as ours, e.g. to hand it to our Tinker/verl hand-offs."""
    return TrajectoryGroup(
        trajectories=[from_cookbook_trajectory(t) for t in group.trajectories_G],
        group_rewards=[float(r) for r in group.final_rewards_G],
        group_metrics=[dict(m) for m in group.metrics_G],
        tags=list(tags),
    )


def _ints(model_input: tinker.ModelInput) -> list[int]:
    try:
        return list(model_input.to_ints())
    except ValueError as error:  # an image chunk: agentenvs trajectories are text tokens
        raise ValueError(f"cannot convert a non-text observation to tokens: {error}") from None


@dataclass
class CookbookGroupBuilder(cookbook.EnvGroupBuilder):
    """An agentenvs :class:`EnvGroupBuilder` as a cookbook one.

    Picklable like the builder it wraps. Group rewards are computed by the
    wrapped builder on the same trajectories, converted to ours.
    """

    builder: EnvGroupBuilder
    eos_token_ids: tuple[int, ...] = ()

    async def make_envs(self) -> Sequence[cookbook.Env]:
        envs = await self.builder.make_envs()
        return [CookbookEnv(env, i, self.eos_token_ids) for i, env in enumerate(envs)]

    async def compute_group_rewards(
        self, trajectory_group: list[cookbook.Trajectory], env_group: Sequence[cookbook.Env]
    ) -> list[tuple[float, Metrics]]:
        ours = [from_cookbook_trajectory(t) for t in trajectory_group]
        inner = [env.env if isinstance(env, CookbookEnv) else env for env in env_group]
        scored = await self.builder.compute_group_rewards(ours, inner)  # type: ignore[arg-type]
        return [(float(reward), dict(metrics)) for reward, metrics in scored]

    async def cleanup(self) -> None:
        # The cookbook does not catch cleanup errors; they would hide the rollout's own.
        try:
            await self.builder.cleanup()
        except Exception:
            logger.exception("cleanup of %s failed", type(self.builder).__name__)

    def logging_tags(self) -> list[str]:
        return list(self.builder.logging_tags())

    @property
    def task_id(self) -> str:
        return self.builder.describe().task_id or ""


@dataclass
class CookbookDataset(cookbook.RLDataset):
    """An agentenvs :class:`RLDataset` as a cookbook one (same batches, wrapped builders)."""

    dataset: RLDataset
    eos_token_ids: tuple[int, ...] = ()

    def get_batch(self, index: int) -> Sequence[cookbook.EnvGroupBuilder]:
        return [
            CookbookGroupBuilder(builder, self.eos_token_ids)
            for builder in self.dataset.get_batch(index)
        ]

    def __len__(self) -> int:
        return len(self.dataset)


def to_cookbook_builder(builder: EnvGroupBuilder, eos_token_ids=()) -> CookbookGroupBuilder:
    return CookbookGroupBuilder(builder, tuple(eos_token_ids))


def to_cookbook_dataset(dataset: RLDataset, eos_token_ids=()) -> CookbookDataset:
    return CookbookDataset(dataset, tuple(eos_token_ids))


@chz.chz
class AgentenvsDatasetBuilder(cookbook.RLDatasetBuilder):
    """A registered agentenvs environment as the ``dataset_builder`` of a cookbook
    ``rl.train.Config``.

    ``model_name_for_tokenizer`` is what the cookbook's own builders take: the
    tokenizer the policy samples with (a Hub id or local directory; ``builtin``
    is the small test tokenizer). ``env_config`` holds the environment's keys as
    ``agentenvs rollout --set`` would.
    """

    env: str
    model_name_for_tokenizer: str
    group_size: int
    batch_size: int
    env_config: dict[str, Any] = chz.field(default_factory=dict)
    n_groups: int | None = None
    split: str = "train"
    test_split: str | None = None

    async def __call__(self) -> tuple[cookbook.RLDataset, cookbook.RLDataset | None]:
        from agentenvs.envs.registry import make
        from agentenvs.rollout.tokenizer import load_tokenizer

        config = make(self.env, **dict(self.env_config))
        tokenizer = load_tokenizer(self.model_name_for_tokenizer)
        eos = _eos_ids(tokenizer)
        train = config.dataset(
            tokenizer,
            group_size=self.group_size,
            batch_size=self.batch_size,
            split=self.split,
            n_groups=self.n_groups,
        )
        test = None
        if self.test_split is not None:
            test = to_cookbook_dataset(
                config.dataset(
                    tokenizer,
                    group_size=self.group_size,
                    batch_size=self.batch_size,
                    split=self.test_split,
                ),
                eos,
            )
        return to_cookbook_dataset(train, eos), test


def _eos_ids(tokenizer: Any) -> tuple[int, ...]:
    eos = getattr(tokenizer, "eos_token_id", None)
    return (eos,) if isinstance(eos, int) else ()


@dataclass
class PolicyCompleter(TokenCompleter):
    """Any agentenvs policy as a cookbook ``TokenCompleter``.

    A shared policy (HF, OpenAI-compatible, PyTRIO) is called as is. A per-env
    factory (scripted, replay) is asked for the policy of the env whose episode
    the calling task runs, which only works for envs wrapped by
    :class:`CookbookEnv`; the slot it sees (:data:`current_slot`) is the env's
    position in its group, exactly as under agentenvs' own ``do_group_rollout``.
    A policy without logprobs gets 0.0 per token (the cookbook requires them), and a
    :class:`~agentenvs.rollout.trainers.common.MissingLogprobsWarning` on its first turn.

    Inside a :class:`CookbookEnv` episode each call runs in the turn's slot
    (:data:`current_turn`: the group key if a collector set one, the env's index,
    the turn number), and the policy's stamp is handed to the env's next step.
    """

    policy: Policy | PolicyFactory
    _per_env: weakref.WeakKeyDictionary[CookbookEnv, Policy] = field(
        default_factory=weakref.WeakKeyDictionary, repr=False
    )
    """Per-env policies, dropped with their episode's env."""
    _warned: bool = field(default=False, repr=False)
    """Whether the missing-logprobs warning was given (once per completer)."""

    async def __call__(
        self,
        model_input: tinker.ModelInput,
        stop: CookbookStopCondition,
        *,
        max_tokens: int | None = None,
    ) -> CookbookTokens:
        policy = self._resolve()
        env = _current_env.get()
        slot = None
        if env is not None:
            slot = current_turn.set(TurnSlot(current_group_key.get(), env.index, env.turns))
        try:
            answer = await policy(_ints(model_input), list(stop), max_tokens=max_tokens)
        finally:
            if slot is not None:
                current_turn.reset(slot)
        out = check_policy_output(answer, max_tokens)
        if env is not None:
            env.pending_logs = turn_logs(out)
        if out.logprobs is None and out.tokens and not self._warned:
            self._warned = True
            warn_no_logprobs("PolicyCompleter", "the policy's actions have no sampler logprobs")
        logprobs = [0.0] * len(out.tokens) if out.logprobs is None else list(out.logprobs)
        return CookbookTokens(
            tokens=list(out.tokens),
            maybe_logprobs=logprobs,
            stop_reason=to_tinker_stop_reason(out.stop_reason),
        )

    def provenance(self) -> dict[str, Any]:
        """The policy's own provenance (model, sampling settings, weights), if it has one."""
        if isinstance(self.policy, SelfDescribing):
            return dict(self.policy.provenance())
        return {"policy": type(self.policy).__name__}

    def _resolve(self) -> Policy:
        if not is_per_env(self.policy):
            return self.policy  # type: ignore[return-value]
        env = _current_env.get()
        if env is None:
            raise PolicyError(
                f"{type(self.policy).__name__} needs to know its environment; it only works "
                "on agentenvs environments wrapped by CookbookGroupBuilder/CookbookEnv"
            )
        cached = self._per_env.get(env)
        if cached is not None:
            return cached
        token = current_slot.set(RolloutSlot(None, env.index))
        try:
            made = policy_for(self.policy, env.env)
        finally:
            current_slot.reset(token)
        self._per_env[env] = made
        return made


def cookbook_provenance(completer: PolicyCompleter, group: cookbook.TrajectoryGroup) -> dict:
    """What sampled a cookbook group: the completer's policy provenance (for a server
    policy: its URL, served model and the weights identity it holds now), with
    ``weights_version`` set to the oldest version the group's turns were stamped
    with, and ``weights_versions`` listing them all when a sync landed mid-group."""
    return with_turn_versions(completer.provenance(), from_cookbook_group(group))


# ---- cookbook -> agentenvs ----------------------------------------------------------------------


@dataclass
class _TurnLimits:
    """The cookbook env's per-turn token budget (:meth:`FromCookbookEnv.max_action_tokens`)."""

    max_tokens_per_turn: int | None


class FromCookbookEnv(Env):
    """A cookbook ``Env`` as an agentenvs :class:`Env` (observations as token lists).

    Observations must be text: an image chunk cannot become token ids and fails
    the episode with a clear error. So does a prompt the cookbook env reports
    as already over its budget (``InitialObservationOverflow``): an agentenvs env
    must start with an observation.
    """

    def __init__(self, env: cookbook.Env) -> None:
        self.env = env
        limits = getattr(env, "rollout_limits", None)
        self.limits = _TurnLimits(getattr(limits, "max_turn_tokens", None))

    def max_action_tokens(self) -> int | None:
        return self.limits.max_tokens_per_turn

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        result = await self.env.initial_observation()
        if isinstance(result, cookbook.InitialObservationOverflow):
            raise ValueError(
                f"{type(self.env).__name__}: the initial prompt is over the env's token budget "
                f"({result.logs or result.metrics})"
            )
        ob, stop = result
        return _ints(ob), list(stop)

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        reason = (extra or {}).get("stop_reason", "stop")
        result = await self.env.step(
            list(action), extra={"stop_reason": to_tinker_stop_reason(reason)}
        )
        return StepResult(
            reward=float(result.reward),
            episode_done=result.episode_done,
            next_observation=_ints(result.next_observation),
            next_stop_condition=list(result.next_stop_condition),
            metrics=dict(result.metrics),
            logs=dict(result.logs),
        )


@dataclass
class FromCookbookGroupBuilder(EnvGroupBuilder):
    """A cookbook ``EnvGroupBuilder`` as an agentenvs one, for :func:`collect`."""

    builder: cookbook.EnvGroupBuilder
    name: str = ""
    """The task id the collector stores (default: the builder's class name)."""
    env_name: str = "cookbook"
    """The env name the records carry (cookbook builders name none themselves)."""
    tokenizer: Any = None
    """The tokenizer the cookbook envs render with, when known (fingerprinted)."""

    async def make_envs(self) -> Sequence[Env]:
        return [FromCookbookEnv(env) for env in await self.builder.make_envs()]

    async def compute_group_rewards(
        self, trajectories: list[Trajectory], envs: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        theirs = to_cookbook_group(
            TrajectoryGroup(trajectories, [0.0] * len(trajectories), [{} for _ in trajectories])
        ).trajectories_G
        inner = [env.env if isinstance(env, FromCookbookEnv) else env for env in envs]
        scored = await self.builder.compute_group_rewards(theirs, inner)
        return [(float(reward), dict(metrics)) for reward, metrics in scored]

    async def cleanup(self) -> None:
        await self.builder.cleanup()

    def logging_tags(self) -> list[str]:
        return list(self.builder.logging_tags())

    @property
    def task_id(self) -> str:
        return self.name or type(self.builder).__name__

    def describe(self) -> GroupDescription:
        return GroupDescription(
            task_id=self.task_id, env_name=self.env_name, tokenizer=self.tokenizer
        )


async def collect_from_cookbook(
    builders: Sequence[cookbook.EnvGroupBuilder],
    policy: Policy | PolicyFactory,
    options: CollectOptions | None = None,
    *,
    out: str | Path | None = None,
    tokenizer: Any = None,
    tokenizer_spec: str | None = None,
    env_name: str = "cookbook",
    names: Sequence[str] | None = None,
):
    """Run cookbook groups with this project's collector; optionally store them.

    ``out`` is a trajectory JSONL file (resumable, as ``agentenvs rollout`` writes
    it). ``tokenizer`` (fingerprinted) and ``tokenizer_spec`` (how to load it again:
    a local directory, a Hub id or ``builtin``; default: its own name) go into the
    provenance so that ``agentenvs view OUT`` decodes with the right tokenizer.
    ``options`` are :func:`collect`'s.
    """
    from agentenvs.rollout.collect.collector import ProvenanceNotes, collect
    from agentenvs.rollout.collect.store import TrajectoryStore

    if names is not None and len(names) != len(builders):
        raise ValueError(f"{len(names)} names for {len(builders)} builders")
    wrapped = [
        FromCookbookGroupBuilder(
            b, names[i] if names else f"{type(b).__name__}/{i}", env_name, tokenizer
        )
        for i, b in enumerate(builders)
    ]
    notes = ProvenanceNotes(tokenizer_spec=tokenizer_spec, sections={"source": "tinker_cookbook"})
    return await collect(
        wrapped,
        policy,
        options,
        store=TrajectoryStore(out) if out is not None else None,
        notes=notes,
    )
