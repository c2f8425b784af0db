"""``openenv``: any OpenEnv environment server, registered like our own environments.

``agentenvs rollout openenv --set url=http://127.0.0.1:8000`` plays episodes of the
OpenEnv environment behind that URL under our collector, renderers and limits (see
:mod:`agentenvs.envs.openenv.adapter`). A task is a reset seed: task ``i`` of split
``train`` resets with ``seed = seed + i`` (``test`` adds 1,000,000), so a rerun plays
the same episodes wherever the environment honours seeds.

This module imports pydantic only: listing the environments loads it, and OpenEnv's
package (with gradio and fastmcp behind it) is imported when an episode starts.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, field_validator

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.rendered_env import Limits, RenderedEnv
from agentenvs.envs.renderers import RendererKind, Tokenizer, make_renderer
from agentenvs.envs.requirements import Requirement, extra
from agentenvs.envs.text import TextEnv

DEFAULT_INSTRUCTIONS = (
    "You are acting in an environment. Each of your replies is sent to it as your action; "
    "its answer comes back as the next message."
)
TEST_SEED_OFFSET = 1_000_000


class OpenEnvConfig(EnvConfig):
    """Any OpenEnv environment server (its WebSocket session), played as a text task."""

    env_name: ClassVar[str] = "openenv"
    gym_name: ClassVar[str] = "OpenEnv"
    default_renderer: ClassVar[RendererKind] = "chat"
    needs_external_server: ClassVar[bool] = True
    requires: ClassVar[tuple[Requirement, ...]] = extra("openenv", "openenv")
    """Its episodes play on an OpenEnv server someone else starts: ``agentenvs demo``
    leaves it out unless asked for by name (``--env openenv``)."""

    url: str = Field(
        "http://127.0.0.1:8000",
        description="Base URL of the OpenEnv server (http:// or ws://; /ws is appended).",
    )
    action_field: str | None = Field(
        None,
        description="The action field that takes the model's text; None reads the server's "
        "/schema and takes its one required string field.",
    )
    observation_field: str | None = Field(
        None,
        description="The observation field shown to the model; None shows every field as "
        "JSON (sorted keys).",
    )
    stop_reason_field: str | None = Field(
        None,
        description="An action field that takes the sampler's stop reason (stop, eos, length); "
        "agentenvs' own OpenEnv server has one named stop_reason.",
    )
    stop_field: str | None = Field(
        None,
        description="An observation field holding the stop sequences of the next action; "
        "agentenvs' own OpenEnv server has one named stop.",
    )
    action_extra: dict[str, Any] = Field(
        default_factory=dict, description="Fixed fields sent with every action."
    )
    reset_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Fields sent with every reset besides the seed."
    )
    instructions: str = Field(
        DEFAULT_INSTRUCTIONS, description="The system message placed before the first observation."
    )
    script: list[str] = Field(
        default_factory=list,
        description="Actions the scripted policy plays, one per turn (smoke tests and demos: an "
        "OpenEnv environment has no oracle of ours).",
    )
    episodes: int = Field(8, ge=1, description="Tasks per split (each one reset seed).")
    connect_timeout: float = Field(10.0, gt=0, description="Seconds to open the session.")
    capacity_wait: float = Field(
        60.0, ge=0, description="Seconds to wait for a session on a server at capacity."
    )
    message_timeout: float = Field(60.0, gt=0, description="Seconds to wait for each answer.")
    limits: Limits = Field(default_factory=lambda: Limits(max_turns=4))

    @field_validator("url")
    @classmethod
    def _url_scheme(cls, url: str) -> str:
        if not url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ValueError(f"url {url!r} must start with http://, https://, ws:// or wss://")
        return url.rstrip("/")

    def num_tasks(self, split: str = "train") -> int:
        self.check_split(split)
        return self.episodes

    def reset_seed(self, task_index: int, split: str = "train") -> int:
        self.check_split(split)
        return self.seed + task_index + (TEST_SEED_OFFSET if split == "test" else 0)

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        from agentenvs.envs.openenv.adapter import OpenEnvTextEnv

        return OpenEnvTextEnv(self, self.reset_seed(task_index, split))

    def make_env(self, task_index: int, tokenizer: Tokenizer, split: str = "train") -> RenderedEnv:
        from agentenvs.envs.openenv.adapter import OpenEnvRenderedEnv

        renderer = make_renderer(self.renderer_kind, tokenizer)
        return OpenEnvRenderedEnv(self.make_text_env(task_index, split), renderer, self.limits)
