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
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.rendered_env import Limits, RenderedEnv
from agentenvs.envs.renderers import RendererKind, Tokenizer, make_renderer
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

    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    """Named published setups: config values, nested as the config nests them."""
    splits: ClassVar[tuple[str, ...]] = ("train", "test")
    """The dataset split names this environment accepts (aliases included). Any
    other name is refused by :meth:`check_split` before a task is made, so an
    environment that ignores ``split`` cannot run its train tasks for a typo."""
    needs_external_server: ClassVar[bool] = False
    """Plays only against a server the user starts (an OpenEnv environment, MCP tools):
    ``agentenvs demo`` leaves it out unless named, since nothing here starts one."""

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
        )

    async def cleanup(self) -> None:
        envs, self.envs = self.envs, []
        for env in envs:
            try:
                await env.close()
            except Exception:  # cleanup must not mask the rollout's own outcome
                logger.exception("closing an environment of group %s failed", self.task_id)
