"""The token-level multi-turn interface every environment in agentenvs implements.

The shapes follow the Env / EnvGroupBuilder pattern of the Tinker cookbook so that
code written against one drops into the other, with two deliberate differences:

* Observations are plain ``list[int]`` token ids (no dependency on ``tinker``).
  An observation is the *whole* context the policy conditions on for its next
  action; when an environment keeps extending one conversation, each observation
  starts with the previous observation plus the previous action. Training-data
  assembly relies on that prefix property to merge turns into one sample.
* The sampler's stop reason travels into :meth:`Env.step` through ``extra``, with
  three values (``stop``, ``eos``, ``length``) so an environment can tell an action
  the model finished from one the sampler cut off.
* Images ride on the token list, never beside it: an observation that shows
  images is an :class:`ImageObservation`, a ``list[int]`` whose tokens already hold
  each image's run of placeholder ids (as many as the model's image processor gives
  it, counted once when the image was rendered), with an :class:`ImagePlacement`
  per image saying where its run starts and which pixels it stands for. Code that
  reads observations as ``list[int]`` keeps working, the prefix property holds for
  images too, and image positions are observation tokens, so they are never trained.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal, Protocol, TypeAlias, TypedDict, runtime_checkable

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.errors import TransientError as TransientError  # the contract names it

Tokens: TypeAlias = list[int]
Observation: TypeAlias = list[int]
Action: TypeAlias = list[int]
Logprobs: TypeAlias = list[float]
StopCondition: TypeAlias = list[str] | list[int]
Metrics: TypeAlias = dict[str, float | int]
Logs: TypeAlias = dict[str, str | int | float]

SamplerStopReason: TypeAlias = Literal["stop", "eos", "length"]
"""Why the sampler stopped: a stop sequence, the end-of-sequence token, or the token cap."""


class StopReason(StrEnum):
    """Why an episode ended; recorded as a one-hot metric ``stop/<reason>``.

    Environments may use their own strings too; these are the ones the shared
    machinery produces.
    """

    COMPLETED = "completed"
    MAX_TURNS = "max_turns"
    MAX_TOKENS = "max_tokens"
    """A single action hit the per-turn token cap (the sampler said ``length``)."""
    RESPONSE_BUDGET = "response_budget"
    """The episode's response-token budget is used up (verl's ``response_length``)."""
    CONTEXT_OVERFLOW = "context_overflow"
    """The conversation would exceed the trajectory token budget."""
    PARSE_ERROR = "parse_error"
    """The action could not be understood and the environment gave up on it."""
    MAX_TOOL_CALLS = "max_tool_calls"
    INVALID_ACTION = "invalid_action"
    ROLLOUT_TIMEOUT = "rollout_timeout"
    ENV_ERROR = "env_error"


STOP_METRIC_PREFIX = "stop/"


def stop_metric(reason: str) -> str:
    """The metric key under which a stop reason is recorded."""
    return f"{STOP_METRIC_PREFIX}{reason}"


def stop_reason_from_metrics(metrics: Metrics) -> str | None:
    for key, value in metrics.items():
        if key.startswith(STOP_METRIC_PREFIX) and value:
            return key[len(STOP_METRIC_PREFIX) :]
    return None


class ActionExtra(TypedDict, total=False):
    """Side information about an action, passed to :meth:`Env.step`."""

    stop_reason: SamplerStopReason


@dataclass(frozen=True)
class ImageRef:
    """An image named by its content, the way records, stores and hand-offs refer to it.

    ``sha256`` is the digest of the decoded pixels (RGB, with the size), not of a file:
    the same picture has one name whatever format carried it, so a trainer's copy can be
    checked against the engine's by decoding and hashing, and a store keeps each image
    once under that name. ``data`` (its PNG bytes) travels with the image in memory and
    between processes that pickle it; a record names the hash only.
    """

    sha256: str
    width: int
    height: int
    data: bytes | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ImagePlacement:
    """Where one image sits in an observation: a run of ``tokens`` placeholder ids
    (``pad``) starting at ``offset``.

    ``tokens`` is what the model's own image processor makes of the image (for the
    Qwen-VL family, ``grid`` t*h*w patches merged ``merge_size**2`` to one), computed
    once when the image was rendered and recorded with ``processor`` (the processor's
    settings, as text) so nothing downstream recomputes or guesses it: a trainer feeds
    the same count, and ``agentenvs check`` can re-derive it and compare.
    """

    offset: int
    tokens: int
    pad: int
    image: ImageRef
    grid: tuple[int, int, int]
    processor: str

    def shifted(self, by: int) -> ImagePlacement:
        """The same image ``by`` tokens further on (its run moved with the tokens)."""
        return replace(self, offset=self.offset + by)

    @property
    def end(self) -> int:
        return self.offset + self.tokens


class ImageObservation(list[int]):
    """An observation that shows images: the token list itself (each image's placeholder
    run already expanded in it) plus :attr:`images`, one :class:`ImagePlacement` per
    image in order. Anything that reads observations as ``list[int]`` reads it as one;
    a policy that can see images reads :func:`observation_images` as well."""

    def __init__(self, tokens: Sequence[int], images: Sequence[ImagePlacement]) -> None:
        super().__init__(tokens)
        self.images: tuple[ImagePlacement, ...] = tuple(images)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ImageObservation, (list(self), self.images))


def observation_images(observation: Sequence[int]) -> tuple[ImagePlacement, ...]:
    """The images an observation shows (none for a plain token list)."""
    return observation.images if isinstance(observation, ImageObservation) else ()


def with_images(tokens: Sequence[int], images: Sequence[ImagePlacement]) -> Observation:
    """``tokens`` as an observation: an :class:`ImageObservation` when it shows images,
    a plain list otherwise (text environments never see the difference)."""
    return ImageObservation(tokens, images) if images else list(tokens)


@dataclass
class StepResult:
    reward: float
    episode_done: bool
    next_observation: Observation
    next_stop_condition: StopCondition
    metrics: Metrics = field(default_factory=dict)
    logs: Logs = field(default_factory=dict)


class ForkUnsupported(AgentEnvsError, RuntimeError):
    """This environment (or its current state) cannot be forked."""


class Env(ABC):
    """One episode of one agent. Single-use: make it, run it to the end, drop it.

    Two methods are required. Everything else the collector may use is declared
    here, with a default that means "not offered": override what your environment
    can do. The collector never looks for undeclared attributes.

    * :meth:`max_action_tokens`: the token cap of the next action, asked before every
      turn (a per-turn cap, and what is left of a per-episode budget).
    * :meth:`max_response_tokens`: the per-episode response budget itself, if any.
    * :meth:`close`: release what the episode holds (a sandbox, a game engine).
    * :meth:`fork`: an independent copy of the live episode (tree rollouts).
    * :meth:`label`: the short name messages use for this environment.
    * :class:`ScriptedActions` (a protocol below): a built-in scripted answer, for
      demos and smoke tests without a model.

    Errors: an exception out of ``initial_observation`` or ``step`` fails the group;
    the collector stores it with its traceback and does not retry it (a bug raises
    the same way on fresh envs). Raise :class:`TransientError` (or a subclass) for a
    failure of the moment, and the group is retried with fresh envs.

    Most environments are written at the text level (:class:`~agentenvs.envs.text.TextEnv`,
    rendered into this interface); one written in tokens, and the loop that drives it
    (what the collector does, without retries and records)::

        class CountDown(Env):  # the prompt is token 3; the model answers 2, then 1

            def __init__(self) -> None:
                self.context, self.expected = [3], 2

            async def initial_observation(self):
                return list(self.context), [0]  # the whole context; stop on token 0

            async def step(self, action, *, extra=None):
                self.context += action  # each observation extends the last one
                right = action[:1] == [self.expected]
                self.expected -= 1
                done = not right or self.expected == 0
                return StepResult(reward=float(right), episode_done=done,
                                  next_observation=[] if done else list(self.context),
                                  next_stop_condition=[0])

        env = CountDown()
        observation, stop = await env.initial_observation()
        while True:
            sampled = await policy(observation, stop)  # TokensWithLogprobs
            result = await env.step(sampled.tokens, extra={"stop_reason": sampled.stop_reason})
            if result.episode_done:
                break
            observation, stop = result.next_observation, result.next_stop_condition
        await env.close()
    """

    @abstractmethod
    async def initial_observation(self) -> tuple[Observation, StopCondition]: ...

    @abstractmethod
    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult: ...

    def max_action_tokens(self) -> int | None:
        """The most tokens the next action may have, or ``None`` for no cap of the env's own.

        The collector asks before every turn and passes it to the policy as ``max_tokens``,
        so the sampler stops there (and says ``length``) instead of the env cutting the
        action afterwards. With a per-episode budget (:meth:`max_response_tokens`) it is
        the smaller of the per-turn cap and what is left of the budget, so it shrinks as
        the episode goes on: every policy honours the budget by honouring this cap.
        """
        return None

    def max_response_tokens(self) -> int | None:
        """The episode's response-token budget (verl's ``response_length``), or ``None``.

        Every token after the prompt counts, the model's and the env's, as in verl's
        ``response_mask``; each turn may use what is left (:meth:`max_action_tokens`) and
        the env ends the episode when it is used up. Declared so trainer bridges and the
        records can read the budget without asking the env's config.
        """
        return None

    async def close(self) -> None:
        """Release what this episode holds. Called once the episode is over (by its
        group's cleanup, or by the tree rollout for a fork); must be idempotent."""

    async def fork(self) -> Env:
        """An independent copy of this live episode, for tree rollouts.

        The copy has the same past (context tokens, history, stop condition) and its
        future never affects this episode or any other copy. It is a new episode to
        clean up like any other (its resources are its own). Environments that cannot
        copy their state raise :class:`ForkUnsupported` (the default).
        """
        raise ForkUnsupported(f"{type(self).__name__} does not implement fork()")

    def label(self) -> str:
        """The short name error messages use for this environment (its class by default).

        A wrapper overrides it to name what it wraps (a rendered text env names its task).
        """
        return type(self).__name__


@dataclass
class TokensWithLogprobs:
    """What a policy returned for one turn. ``logprobs`` is None when the sampler gave none."""

    tokens: Tokens
    logprobs: Logprobs | None = None
    stop_reason: SamplerStopReason = "stop"


@dataclass
class Transition:
    ob: Observation
    ac: TokensWithLogprobs
    reward: float
    episode_done: bool
    metrics: Metrics = field(default_factory=dict)
    logs: Logs = field(default_factory=dict)
    images: tuple[ImagePlacement, ...] = ()
    """The images ``ob`` shows (its :func:`observation_images`); none for text."""


@dataclass
class Trajectory:
    transitions: list[Transition]
    final_ob: Observation = field(default_factory=list)
    stop_reason: str | None = None

    @property
    def step_reward(self) -> float:
        return sum(t.reward for t in self.transitions)


@dataclass
class TrajectoryGroup:
    """The trajectories of one group plus the group-level rewards and metrics."""

    trajectories: list[Trajectory]
    group_rewards: list[float]
    group_metrics: list[Metrics]
    tags: list[str] = field(default_factory=list)

    def total_rewards(self) -> list[float]:
        """Per trajectory: sum of step rewards plus the group reward."""
        return [
            traj.step_reward + group_reward
            for traj, group_reward in zip(self.trajectories, self.group_rewards, strict=True)
        ]


@dataclass(frozen=True)
class GroupDescription:
    """What a builder says about its group, for the records and the run identity.

    Every field is optional: an empty description is recorded as an unnamed env with
    an empty config, its task id taken from the group's position. ``config`` is the
    environment's configuration as JSON-ready data (hashed into the run identity, so
    a resumed run with another config is refused); ``tokenizer`` is the one the envs
    render with (its fingerprint goes into the run identity and the provenance; the
    object itself is never stored). The collector records the provenance of every
    store from these descriptions alone, so a builder says everything it knows.
    """

    task_id: str | None = None
    env_name: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    split: str | None = None
    group_size: int | None = None
    tokenizer: Any = None
    env_version: str | None = None
    """The environment's version (``EnvConfig.version``), recorded in provenance."""
    renderer: str | None = None
    """How observations become tokens (``chat`` or ``continuation``), as resolved."""
    protocol: str | None = None
    """The action protocol the model is asked to speak, for an environment with several."""
    tool_format: str | None = None
    """The parser that reads the model's tool calls, for an environment that lets one be
    chosen (``hermes``, ``qwen3_coder``): runs parsed differently are not comparable."""
    data: Mapping[str, str] = field(default_factory=dict)
    """The content hash of each data source the environment reads (questions, corpus,
    games: ``EnvConfig.data_digests()``), by source name; never a path, so a run on an
    edited file is told apart from one on the original."""


class EnvGroupBuilder(ABC):
    """Makes the envs of one group (e.g. G copies of one task for GRPO) and scores the group.

    Builders are pickled to worker processes and stored in datasets, so they hold
    configuration only; heavy clients are created in :meth:`make_envs` or lazily.

    Required: :meth:`make_envs`. Optional, with defaults: :meth:`compute_group_rewards`,
    :meth:`logging_tags`, :meth:`cleanup`, :meth:`describe` (task id, env name and
    config for the records). A builder that runs its whole group itself (tree
    rollouts) implements :class:`RunsOwnGroup` as well.
    """

    @abstractmethod
    async def make_envs(self) -> Sequence[Env]: ...

    async def compute_group_rewards(
        self, trajectories: list[Trajectory], envs: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        return [(0.0, {}) for _ in trajectories]

    def logging_tags(self) -> list[str]:
        return []

    async def cleanup(self) -> None:
        """Release what :meth:`make_envs` created. Always called; must be idempotent."""

    def describe(self) -> GroupDescription:
        """Task id, env name, config, split, group size and tokenizer, where known."""
        return GroupDescription()


@runtime_checkable
class RunsOwnGroup(Protocol):
    """A builder that runs its group itself instead of one episode per env.

    Tree rollouts fork live episodes mid-way, so the plain "make envs, run each to
    its end" plan does not describe them. The collector calls :meth:`group_rollout`
    in place of that plan, with the same retries, timeout and cleanup guarantees.
    """

    async def group_rollout(self, policy: Any) -> TrajectoryGroup: ...


@runtime_checkable
class ScriptedActions(Protocol):
    """An env that can answer for itself: the ``scripted`` policy asks it for an action.

    ``variant`` names the script (``"oracle"`` plays to win; envs may offer more).
    The answer is the action's tokens and the sampler stop reason to report, or
    ``None`` when the env has no such variant. It may be awaitable.
    """

    def scripted_action(self, variant: str = "oracle") -> Any: ...


class RLDataset(ABC):
    @abstractmethod
    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]: ...

    @abstractmethod
    def __len__(self) -> int: ...


@dataclass
class ListDataset(RLDataset):
    """Builders cut into fixed-size batches; the last partial batch is kept."""

    builders: list[EnvGroupBuilder]
    batch_size: int

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} out of range (dataset has {len(self)} batches)")
        start = index * self.batch_size
        return self.builders[start : start + self.batch_size]

    def __len__(self) -> int:
        return -(-len(self.builders) // self.batch_size)
