"""The ``harness`` environment: its configuration, groups and tasks.

``agentenvs rollout harness --set harness=mini-swe-agent --set tasks=DIR --policy openai
...`` runs ``group_size`` episodes of one harness per task, each scored by the task's
tests. With no ``tasks`` it plays the one example task shipped here
(``data/tasks/fix-calc``). A task folder with ``train/`` and ``test/`` folders inside has
splits; any other serves both splits the same tasks.

Harness episodes have no scripted policy (the harness asks, a model answers) and need
the harness CLIs that ``make harnesses`` installs, so ``agentenvs demo`` leaves this
environment out unless named.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator

from agentenvs.envs.config import EnvConfig, TextGroupBuilder
from agentenvs.envs.harness.env import HarnessEnv, HarnessSettings
from agentenvs.envs.harness.harnesses import HARNESSES, Installed, harness
from agentenvs.envs.harness.segments import TreeOptions
from agentenvs.envs.harness.task import HarnessTask, load_tasks
from agentenvs.envs.rendered_env import Limits
from agentenvs.envs.requirements import Requirement, extra
from agentenvs.envs.text import TextEnv
from agentenvs.envs.tool_calls import CallFormat
from agentenvs.envs.types import Env, Metrics, Trajectory

EXAMPLE_TASKS = Path(str(resources.files("agentenvs.envs.harness").joinpath("data", "tasks")))
"""The task shipped with the package (``fix-calc``), played when no ``tasks`` is given."""


class HarnessConfig(EnvConfig):
    """An agent CLI works on a task in a jail, its model calls captured by a gateway."""

    env_name: ClassVar[str] = "harness"
    gym_name: ClassVar[str] = "Harness"
    version: ClassVar[str] = "1"
    needs_external_server: ClassVar[bool] = True
    plays_as_text: ClassVar[bool] = False
    requires: ClassVar[tuple[Requirement, ...]] = extra("gateway", "starlette", "uvicorn")

    harness: str = Field("mini-swe-agent", description=f"One of {', '.join(sorted(HARNESSES))}.")
    tasks: str | None = Field(
        None, description="A task folder, or a folder of them (None: the example)."
    )
    harnesses_dir: str | None = Field(
        None,
        description="Where `make harnesses` installed them ($AGENTENVS_HARNESSES, ./.harnesses).",
    )
    tool_format: str | None = Field(
        None, description="The template's tool-call format (None: told from it)."
    )
    model_name: str = "agentenvs"
    max_tokens: int = Field(2048, ge=1, description="Tokens one turn may sample.")
    max_context: int | None = Field(None, ge=1, description="Prompt tokens a request may have.")
    agent_timeout: float | None = Field(None, gt=0, description="Seconds (default: the task's).")
    memory_mb: int | None = Field(
        None, ge=64, description="Memory of the jail (default: the task's)."
    )
    limits: Limits = Field(default_factory=lambda: Limits(max_turns=30))

    @field_validator("harness")
    @classmethod
    def _known_harness(cls, name: str) -> str:
        harness(name)  # an unknown name is refused with the known ones
        return name

    @field_validator("tool_format")
    @classmethod
    def _known_format(cls, fmt: str | None) -> str | None:
        if fmt is not None:
            CallFormat(fmt)
        return fmt

    @property
    def tool_call_format(self) -> str | None:
        return self.tool_format  # None: told from the chat template at run time

    def _folder(self, split: str) -> Path:
        root = Path(self.tasks) if self.tasks else EXAMPLE_TASKS
        return root / split if (root / split).is_dir() else root

    def task_list(self, split: str = "train") -> list[HarnessTask]:
        return _tasks(str(self._folder(split)))

    def num_tasks(self, split: str = "train") -> int:
        return len(self.task_list(split))

    def task_id(self, task_index: int, split: str = "train") -> str:
        return f"{split}/{self.task_list(split)[task_index].name}"

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        raise TypeError("harness episodes are token-level: use group_builder() or make_env()")

    def settings(self) -> HarnessSettings:
        return HarnessSettings(
            harness=harness(self.harness),
            installed=Installed.find(self.harnesses_dir),
            tool_format=CallFormat(self.tool_format) if self.tool_format else None,
            tree=TreeOptions(self.max_context, self.max_tokens, self.model_name),
            max_turns=self.limits.max_turns or 30,
            agent_timeout=self.agent_timeout,
            memory_mb=self.memory_mb,
        )

    def make_env(self, task_index: int, tokenizer: Any, split: str = "train") -> HarnessEnv:  # type: ignore[override]
        return HarnessEnv(self.task_list(split)[task_index], tokenizer, self.settings())

    def group_builder(  # type: ignore[override]
        self, task_index: int, group_size: int, tokenizer: Any, split: str = "train"
    ) -> HarnessGroupBuilder:
        self.check_split(split)
        return HarnessGroupBuilder(self, task_index, group_size, tokenizer, split)


@functools.lru_cache(maxsize=32)
def _tasks(folder: str) -> list[HarnessTask]:
    return load_tasks(folder)


@dataclass
class HarnessGroupBuilder(TextGroupBuilder):
    """``group_size`` episodes of one harness on one task: the text groups' making,
    describing and closing, with no group reward (each episode is scored by the
    task's tests when its harness exits)."""

    config: HarnessConfig  # type: ignore[assignment]

    async def compute_group_rewards(
        self, trajectories: list[Trajectory], envs: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        return [(0.0, {}) for _ in trajectories]

    def logging_tags(self) -> list[str]:
        return ["harness", self.config.harness]
