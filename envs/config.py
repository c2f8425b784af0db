"""EnvConfig: what a registered environment provides, and the generic group builder.

An environment package registers one :class:`EnvConfig` subclass under the
``agentenvs.envs`` entry-point group. The config is a pydantic model (unknown keys
are rejected with a clear message), knows how many tasks it has, and makes one
:class:`TextEnv` per episode. Everything else (rendering, limits, groups,
datasets, the gymnasium wrapper, the CLI) is shared.

Modules that define configs should import heavy dependencies lazily: listing the
environments (and registering their gym ids) imports every registered config.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.rendered_env import Limits, RenderedEnv
from agentenvs.envs.renderers import RendererKind, Tokenizer, make_renderer
from agentenvs.envs.requirements import Requirement
from agentenvs.envs.text import TextEnv
from agentenvs.envs.types import (
    Env,
    EnvGroupBuilder,
    GroupDescription,
    ListDataset,
    Metrics,
    RLDataset,
    Trajectory,
)

if TYPE_CHECKING:
    from agentenvs.envs.rewards.identity import RewardIdentity

logger = logging.getLogger(__name__)


class UnknownSplitError(AgentEnvsError, ValueError):
    """A split name the environment does not declare (:attr:`EnvConfig.splits`)."""


class EnvConfig(BaseModel):
    """Base class of every registered environment's configuration."""

    model_config = ConfigDict(extra="forbid")

    env_name: ClassVar[str] = ""
    """The registry name (``retool``); set by each subclass."""
    gym_name: ClassVar[str] = ""
    """The gymnasium id stem (``ReTool`` gives ``agentenvs/ReTool-v0``)."""
    version: ClassVar[str] = "0"
    default_renderer: ClassVar[RendererKind] = "chat"

    renderer: RendererKind | None = Field(
        None, description="continuation or chat; None takes the environment's default."
    )
    limits: Limits = Field(default_factory=Limits)
    seed: int = 0
    preset: str | None = Field(
        None,
        description="A published setup to reproduce (see the environment's docs); its values "
        "fill every key you did not set yourself.",
    )

    _data_digests: tuple[dict[str, str], dict[str, str]] | None = PrivateAttr(default=None)
    """The last :meth:`data_digests`: (the sources it hashed, their hashes)."""

    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    """Named published setups: config values, nested as the config nests them."""
    splits: ClassVar[tuple[str, ...]] = ("train", "test")
    """The dataset split names this environment accepts (aliases included). Any
    other name is refused by :meth:`check_split` before a task is made, so an
    environment that ignores ``split`` cannot run its train tasks for a typo."""
    demo_tokenizer: ClassVar[str] = "builtin"
    """The tokenizer ``agentenvs demo`` renders this environment with (a
    ``load_tokenizer`` name): one with image tokens for an environment that shows images."""
    needs_external_server: ClassVar[bool] = False
    """Plays only against a server the user starts (an OpenEnv environment, MCP tools):
    ``agentenvs demo`` leaves it out unless named, since nothing here starts one."""
    plays_as_text: ClassVar[bool] = True
    """Its episodes are text episodes (:meth:`make_text_env`), which the gymnasium
    adapter and the OpenEnv and ORS servers play. False for a token-level environment
    whose episode is driven from inside (``harness``: an agent CLI asks, the model
    answers): those refuse ``gymnasium.make`` in one line instead of failing at reset."""
    any_event_loop: ClassVar[bool] = False
    """Its episodes run on any asyncio event loop, uvloop included. False (the safe
    default) for an environment whose episodes may start the local sandbox: its workers
    start as another user, which only asyncio's own loop can do (uvloop's process
    spawner refuses ``user``/``group``). An env server hosting only environments that
    declare True runs uvloop, whose WebSocket frames cost less than half the CPU
    (``agentenvs serve``: :func:`agentenvs.envs.serving.run.event_loop_for`)."""
    requires: ClassVar[tuple[Requirement, ...]] = ()
    """Modules its episodes import beyond agentenvs' core, each with what installs it
    (``extra("retool", "math_verify")``): ``agentenvs list`` says which are missing and
    ``agentenvs rollout`` refuses to start without them. :meth:`requirements` may
    narrow or widen it for one configuration."""

    deterministic: ClassVar[bool] = False
    """An episode is a function of its config, split, task and the actions played: made
    again from the recorded config and stepped with the recorded actions, it gives the
    same observation tokens, rewards, metrics, ends and tool outcomes. ``agentenvs check
    --replay`` re-runs such episodes instead of trusting their record
    (``rollout/inspect/replay.py``); :meth:`replay_refusal` may still refuse a config
    whose parts are not (an HTTP retriever, an LLM judge)."""
    replay_volatile: ClassVar[frozenset[str]] = frozenset()
    """Metric and log keys whose values depend on the machine, not on the episode (a
    sandbox's run time): a replay leaves them out of its comparison."""

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        """Fill unset keys from the named preset; what the caller set always wins."""
        if not isinstance(data, dict) or data.get("preset") is None:
            return data
        name = data["preset"]
        if name not in cls.presets:
            known = ", ".join(sorted(cls.presets)) or "none"
            raise ValueError(f"unknown preset {name!r} for {cls.env_name or cls.__name__}; "
                             f"presets: {known}")  # fmt: skip
        return merge_preset(cls.presets[name], data)

    # ---- what each environment implements -------------------------------------------
    @classmethod
    def demo_overrides(cls) -> dict[str, Any]:
        """Settings ``agentenvs demo`` applies to this environment (none by default)."""
        return {}

    def shutdown(self) -> None:
        """Release what this config holds for the whole process (default: nothing).

        Episodes release their own resources (:meth:`TextEnv.close`); a config that
        shares something across them (ALFWorld's engine processes) stops it here. A
        server calls it when it stops; it must be idempotent, and the resource may
        start again on next use."""

    def requirements(self) -> tuple[Requirement, ...]:
        """What this configuration's episodes import beyond the core (default:
        :attr:`requires`); one whose settings choose a backend names that backend's."""
        return self.requires

    def num_tasks(self, split: str = "train") -> int:
        raise NotImplementedError

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        raise NotImplementedError

    def task_id(self, task_index: int, split: str = "train") -> str:
        return f"{split}/{task_index}"

    async def group_rewards(
        self, trajectories: list[Trajectory], envs: Sequence[TextEnv]
    ) -> list[tuple[float, Metrics]]:
        """Rewards that depend on the whole group (default: none)."""
        return [(0.0, {}) for _ in trajectories]

    def logging_tags(self) -> list[str]:
        return [self.env_name] if self.env_name else []

    def data_sources(self) -> dict[str, str]:
        """The files and folders this config reads its tasks and world from, by name
        (``{"corpus": "/data/wiki.jsonl", "questions/train": ...}``); none by default.

        Why: a config names *where* data lives, not *what* it held. A store records the
        content hash of each source (:mod:`agentenvs.envs.data_hashes`), so a run on an
        edited corpus or a changed problem file is told apart from the original even when
        every knob and path is the same. Declare every source the config may read (both
        splits, the index next to the corpus); a source behind a server is not local data
        and is left out. Reading them must be cheap: no task is loaded to answer."""
        return {}

    def data_digests(self) -> dict[str, str]:
        """The content hash of each of :meth:`data_sources`, by name (what a builder's
        description and so every record's provenance carries).

        Hashed once per config object and set of sources: every group of a run describes
        itself, and walking a folder of game files once per group would cost more than
        the episode. A file changed under a config that already hashed it is seen by a
        new config (a new run), not by this one."""
        from agentenvs.envs.data_hashes import data_digests

        sources = self.data_sources()
        known = self._data_digests
        if known is None or known[0] != sources:
            known = self._data_digests = (sources, data_digests(sources))
        return dict(known[1])

    # ---- what a record of this environment can be checked against --------------------
    def reward_components(self) -> list[RewardIdentity]:
        """The reward components episodes under this config compute, each naming its
        function, version and code hash (``envs/rewards/identity.py``). The collector
        stores them with every record (``provenance.reward.components``) and ``agentenvs
        check`` compares them across a store and with the installed code. Default: none
        declared (``check`` warns that the rewards name no code)."""
        return []

    def limit_reward(self, reason: str) -> float | None:
        """The reward of the final step of an episode a shared limit ended with
        ``reason`` (a :class:`~agentenvs.envs.types.StopReason`), when the rule, not the
        task, sets it; None when the task grades that ending itself.

        The default is :class:`~agentenvs.envs.rendered_env.RenderedEnv`'s rule: an
        action cut off by the per-turn cap ends the episode (``max_tokens``) with
        ``limits.truncation_reward``, and an action holding ids past the vocabulary
        with 0. A task whose
        :meth:`~agentenvs.envs.text.TextEnv.on_limit` adds a reward to those endings
        says so here. ``agentenvs check`` fails a limit-ended episode whose final
        reward breaks the rule (a cut-off action that kept a reward)."""
        if reason == "max_tokens":
            return self.limits.truncation_reward
        if reason == "out_of_vocabulary":
            return 0.0
        return None

    def replay_refusal(self) -> str | None:
        """Why episodes under this config cannot be re-run from their record, or None
        when they can (:attr:`deterministic`). An environment that is deterministic
        except for an optional part (a remote service, a judge) names the part here."""
        if not self.deterministic:
            name = self.env_name or type(self).__name__
            return f"{name} does not declare deterministic episodes (EnvConfig.deterministic)"
        return None

    # ---- shared machinery ------------------------------------------------------------
    @classmethod
    def check_split(cls, split: str) -> None:
        """Refuse a split this environment does not declare (:attr:`splits`): the one
        check every way of making tasks (datasets, group builders, gymnasium) goes
        through."""
        if split not in cls.splits:
            raise UnknownSplitError(
                f"unknown split {split!r} for {cls.env_name or cls.__name__}; "
                f"its splits: {', '.join(cls.splits)}"
            )

    @property
    def renderer_kind(self) -> RendererKind:
        return self.renderer or self.default_renderer

    @property
    def action_protocol(self) -> str | None:
        """The action protocol the model is asked to speak, for an environment that
        offers several (Search-R1's and ReTool's ``protocol``); recorded in provenance."""
        return None

    @property
    def tool_call_format(self) -> str | None:
        """The parser that reads the model's tool calls, for an environment that lets one
        be chosen (ORS's, Harbor's and the harness's ``tool_format``); recorded in
        provenance so ``compare`` can refuse runs whose calls were parsed differently."""
        return None

    def config_hash(self) -> str:
        return dumped_config_hash(self.model_dump(mode="json"))

    def make_env(self, task_index: int, tokenizer: Tokenizer, split: str = "train") -> RenderedEnv:
        renderer = make_renderer(self.renderer_kind, tokenizer)
        return RenderedEnv(self.make_text_env(task_index, split), renderer, self.limits)

    def group_builder(
        self, task_index: int, group_size: int, tokenizer: Tokenizer, split: str = "train"
    ) -> TextGroupBuilder:
        self.check_split(split)
        return TextGroupBuilder(self, task_index, group_size, tokenizer, split)

    def dataset(
        self,
        tokenizer: Tokenizer,
        *,
        group_size: int,
        batch_size: int = 1,
        split: str = "train",
        n_groups: int | None = None,
    ) -> RLDataset:
        """Groups over the split's tasks in order, wrapping around if ``n_groups`` is larger."""
        self.check_split(split)
        total = self.num_tasks(split)
        if total <= 0:
            raise ValueError(f"environment {self.env_name!r} has no tasks in split {split!r}")
        count = total if n_groups is None else n_groups
        builders: list[EnvGroupBuilder] = [
            self.group_builder(i % total, group_size, tokenizer, split) for i in range(count)
        ]
        return ListDataset(builders, batch_size)


def dumped_config_hash(dumped: Mapping[str, Any]) -> str:
    """:meth:`EnvConfig.config_hash` of a config as dumped to JSON (a record's copy)."""
    dumped = dict(dumped)
    if dumped.get("preset") is None:
        dumped.pop("preset", None)  # configs hash as they did before presets existed
    payload = json.dumps(dumped, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def merge_preset(preset: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``given`` laid over ``preset``, nested dicts merged key by key.

    A nested model the caller passed as an object (not a dict) replaces the preset's
    values for that key whole: it has no record of which of its fields were set.
    """
    merged = dict(preset)
    for key, value in given.items():
        base = merged.get(key)
        if isinstance(base, dict) and isinstance(value, dict):
            merged[key] = merge_preset(base, value)
        else:
            merged[key] = value
    return merged


@dataclass
class TextGroupBuilder(EnvGroupBuilder):
    """``group_size`` episodes of the same task: the GRPO grouping."""

    config: EnvConfig
    task_index: int
    group_size: int
    tokenizer: Tokenizer
    split: str = "train"
    envs: list[RenderedEnv] = field(default_factory=list, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["envs"] = []  # live episodes do not travel
        return state

    async def make_envs(self) -> Sequence[Env]:
        made = [
            self.config.make_env(self.task_index, self.tokenizer, self.split)
            for _ in range(self.group_size)
        ]
        self.envs.extend(made)
        return made

    async def compute_group_rewards(
        self, trajectories: list[Trajectory], envs: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        tasks = [env.task if isinstance(env, RenderedEnv) else env for env in envs]
        return await self.config.group_rewards(trajectories, tasks)  # type: ignore[arg-type]

    def logging_tags(self) -> list[str]:
        return self.config.logging_tags()

    @property
    def task_id(self) -> str:
        return self.config.task_id(self.task_index, self.split)

    def describe(self) -> GroupDescription:
        return GroupDescription(
            task_id=self.task_id,
            env_name=self.config.env_name,
            config=self.config.model_dump(mode="json"),
            split=self.split,
            group_size=self.group_size,
            tokenizer=self.tokenizer,
            env_version=type(self.config).version,
            renderer=self.config.renderer_kind,
            protocol=self.config.action_protocol,
            tool_format=self.config.tool_call_format,
            data=self.config.data_digests(),
        )

    async def cleanup(self) -> None:
        envs, self.envs = self.envs, []
        for env in envs:
            try:
                await env.close()
            except Exception:  # cleanup must not mask the rollout's own outcome
                logger.exception("closing an environment of group %s failed", self.task_id)
