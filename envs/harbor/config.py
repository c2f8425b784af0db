"""``harbor``: Harbor-format tasks (terminal tasks scored by their own tests) as an env.

``agentenvs rollout harbor --set tasks=path/to/tasks`` plays every task directory under
``tasks`` (or the one task ``tasks`` names). The model works through a ``bash`` tool
(hermes calls by default; ``tool_format`` picks the parser); a reply with no tool call
says it is done, and the task's own ``tests/test.sh`` then scores the episode with the
reward it writes. Commands and tests run in our sandbox (see
:mod:`agentenvs.envs.harbor.workspace` and docs/harbor.md for the local fallback and
what of Harbor's format is read). The ``scripted`` policy's oracle plays the task's
reference solution (``solution/solve.sh``).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field, PrivateAttr

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.rendered_env import Limits, RenderedEnv
from agentenvs.envs.renderers import RendererKind, Tokenizer, make_renderer
from agentenvs.envs.requirements import Requirement, extra
from agentenvs.envs.text import TextEnv
from agentenvs.envs.tool_calls import CallFormat
from agentenvs.sandbox.base import SandboxConfig

DEFAULT_SYSTEM = (
    "You are working in a terminal. Run shell commands with the bash tool, one call per "
    'command: <tool_call>{"name": "bash", "arguments": {"command": "..."}}</tool_call>. '
    "Each command starts in the task's working directory. When the task is done, reply "
    "without a tool call; the task's tests then check your work."
)


class HarborConfig(EnvConfig):
    """Harbor-format tasks, solved with shell commands and scored by their own tests."""

    env_name: ClassVar[str] = "harbor"
    gym_name: ClassVar[str] = "Harbor"
    default_renderer: ClassVar[RendererKind] = "chat"
    splits: ClassVar[tuple[str, ...]] = ("train",)
    needs_external_server: ClassVar[bool] = True
    """Its tasks come from a directory you give: ``agentenvs demo`` leaves it out."""

    tasks: str = Field(..., description="A Harbor task directory, or a folder of them.")
    tool_format: CallFormat = Field(CallFormat.HERMES, description="How the model calls bash.")
    system_prompt: str = DEFAULT_SYSTEM
    command_timeout: float = Field(60.0, gt=0, description="Seconds per command (at most).")
    max_commands: int = Field(32, ge=1, description="Commands per episode.")
    max_output_chars: int = Field(4000, ge=100, description="Of a command's output shown.")
    sandbox: SandboxConfig = Field(
        default_factory=lambda: SandboxConfig(
            backend="local", timeout=600.0, workdir_size_mb=256, max_processes=64
        ),
        description="Where commands and tests run (the local fallback: docs/harbor.md).",
    )
    limits: Limits = Field(default_factory=lambda: Limits(max_turns=16))
    _loaded: list = PrivateAttr(default_factory=list)

    @property
    def tool_call_format(self) -> str:
        return str(self.tool_format)

    def requirements(self) -> tuple[Requirement, ...]:
        """Nothing beyond the core for the local sandbox; the docker client for docker."""
        return extra("docker", "docker") if self.sandbox.backend == "docker" else ()

    def task_dirs(self) -> list[Path]:
        root = Path(self.tasks)
        if (root / "task.toml").is_file():
            return [root]
        found = sorted(p.parent for p in root.glob("*/task.toml"))
        if not found:
            raise ValueError(f"tasks={self.tasks!r}: no Harbor task (task.toml) there")
        return found

    def loaded(self) -> list:
        from agentenvs.envs.harbor.task import HarborTask

        if not self._loaded:
            self._loaded.extend(HarborTask.load(p) for p in self.task_dirs())
        return self._loaded

    def num_tasks(self, split: str = "train") -> int:
        self.check_split(split)
        return len(self.task_dirs())

    def task_id(self, task_index: int, split: str = "train") -> str:
        return f"{split}/{self.task_dirs()[task_index].name}"

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        from agentenvs.envs.harbor.env import HarborTextEnv

        self.check_split(split)
        return HarborTextEnv(self, self.loaded()[task_index])

    def make_env(self, task_index: int, tokenizer: Tokenizer, split: str = "train") -> RenderedEnv:
        from agentenvs.envs.harbor.env import HarborRenderedEnv

        renderer = make_renderer(self.renderer_kind, tokenizer)
        return HarborRenderedEnv(self.make_text_env(task_index, split), renderer, self.limits)
