"""The charts environment's configuration (registered as ``charts``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agentenvs.envs.charts.charts import make_chart
from agentenvs.envs.charts.reward import answer_reward
from agentenvs.envs.config import EnvConfig
from agentenvs.envs.rendered_env import Limits, RenderedEnv
from agentenvs.envs.renderers import RendererKind, Tokenizer
from agentenvs.envs.requirements import Requirement, extra
from agentenvs.envs.rewards.identity import RewardIdentity, identity_of
from agentenvs.envs.text import TextEnv
from agentenvs.envs.vision.processing import VisionSpec
from agentenvs.envs.vision.render import vision_renderer


class ChartsConfig(EnvConfig):
    """Bar-chart questions answered by zooming in: images in the prompt and from a tool."""

    env_name: ClassVar[str] = "charts"
    gym_name: ClassVar[str] = "Charts"
    default_renderer: ClassVar[RendererKind] = "chat"
    demo_tokenizer: ClassVar[str] = "qwen2.5-vl"
    deterministic: ClassVar[bool] = True
    requires: ClassVar[tuple[Requirement, ...]] = extra("vision", "PIL")

    tasks: int = Field(256, ge=1, description="Charts per split.")
    max_zooms: int = Field(4, ge=1, description="Zoom calls allowed per episode.")
    image_processor: str | None = Field(
        None,
        description="The model's image processor as an image placement records it "
        "(`qwen-vl patch_size=14 ...`); None: the one saved with the tokenizer's model, "
        "else the Qwen-VL family's published settings.",
    )
    limits: Limits = Field(default_factory=lambda: Limits(max_turns=6))

    def reward_components(self) -> list[RewardIdentity]:
        """One component: the exact integer match (the config does not change it)."""
        return [identity_of(answer_reward)]

    def num_tasks(self, split: str = "train") -> int:
        self.check_split(split)
        return self.tasks

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        from agentenvs.envs.charts.env import ChartsEnv

        chart = make_chart(f"{self.seed}/{split}/{task_index}")
        return ChartsEnv(chart, self.max_zooms)

    def make_env(self, task_index: int, tokenizer: Tokenizer, split: str = "train") -> RenderedEnv:
        spec = None if self.image_processor is None else VisionSpec.from_key(self.image_processor)
        renderer = vision_renderer(self.renderer_kind, tokenizer, spec=spec)
        return RenderedEnv(self.make_text_env(task_index, split), renderer, self.limits)
