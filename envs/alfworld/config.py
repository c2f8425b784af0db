"""ALFWorldConfig: the registered ``alfworld`` environment (gymnasium ``agentenvs/ALFWorld-v0``).

Household text games on the real ALFWorld / TextWorld PDDL engine. Games come
from ``data``: the ones shipped with the package (six task types, train /
valid_seen / valid_unseen), or ALFWorld's dataset when ``$ALFWORLD_DATA`` holds
it (``auto``), or a folder. Episodes run on engines in worker processes (see
:mod:`agentenvs.envs.alfworld.pool`). Nothing heavy is imported at module level.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from agentenvs.envs.alfworld.games import SPLIT_ALIASES, SPLITS
from agentenvs.envs.alfworld.prompts import STRINGS
from agentenvs.envs.alfworld.scenes import TASK_TYPES
from agentenvs.envs.config import EnvConfig
from agentenvs.envs.rendered_env import Limits, RenderedEnv
from agentenvs.envs.renderers import RendererKind, Tokenizer, make_renderer
from agentenvs.envs.requirements import Requirement, extra
from agentenvs.envs.strings import SettableStrings
from agentenvs.envs.text import TextEnv
from agentenvs.envs.types import Metrics, Trajectory

if TYPE_CHECKING:
    from agentenvs.envs.rewards.identity import RewardIdentity

GIGPO_PRESET: dict[str, Any] = {
    # langfengQ/verl-agent: agent_system/environments/prompts/alfworld.py,
    # env_manager.AlfWorldEnvironmentManager.build_text_obs, env_package/alfworld/projection.py
    # (alfworld_projection), the trainer's apply_invalid_action_penalty and the env's
    # compute_reward; docs/alfworld.md has the table with each value's source.
    "protocol": "tag",
    "renderer": "chat",
    "history": "window",
    "history_window": 2,
    "prompt_layout": "verl_agent",
    "show_admissible": True,
    "require_think": True,
    "reject_cjk": True,
    "stop_at_action": False,
    "action_pick": "first",
    "action_matching": "exact",
    "on_no_action": "send_tail",
    "penalise_inadmissible": False,
    "invalid_action_penalty": 0.1,
    "success_reward": 10.0,
    # run_alfworld.sh: data.max_response_length=512 per step, data.max_prompt_length=2048;
    # a reply the cap cut is still projected to an action (rollout_loop decodes whatever
    # was sampled and steps the envs with it).
    "limits": {
        "max_turns": 50,
        "max_tokens_per_turn": 512,
        "on_truncated_action": "pass",
        "max_prompt_tokens": 2048,
    },
}


class ALFWorldConfig(EnvConfig, SettableStrings):
    """ALFWorld: find, take, clean/heat/cool and place objects in a text house."""

    env_name: ClassVar[str] = "alfworld"
    gym_name: ClassVar[str] = "ALFWorld"
    splits: ClassVar[tuple[str, ...]] = (*SPLITS, *SPLIT_ALIASES)
    default_renderer: ClassVar[RendererKind] = "chat"
    requires: ClassVar[tuple[Requirement, ...]] = extra("alfworld", "alfworld", "textworld")

    deterministic: ClassVar[bool] = True

    data: str = Field(
        "auto",
        description="shipped | auto (ALFWorld's data folder, $ALFWORLD_DATA else "
        "~/.cache/alfworld, when it holds json_2.1.1; else shipped, with a warning) | a "
        "folder: json_2.1.1 or the folder above it.",
    )
    task_types: list[str] = Field(
        default_factory=lambda: list(TASK_TYPES), description="Which ALFWorld task types to play."
    )
    max_games: int | None = Field(None, ge=1, description="Use only the first N games of a split.")
    protocol: Literal["tag", "tool"] = Field(
        "tag", description="tag: <action>...</action>; tool: an alfworld_step tool call."
    )
    history: Literal["full", "window"] = Field(
        "full",
        description="full: one growing conversation (token-in/token-out); window: every turn "
        "is a fresh prompt with the last history_window steps (a new training sample per step).",
    )
    history_window: int = Field(2, ge=0, description="Earlier steps shown in window mode.")
    show_admissible: bool = Field(True, description="List the admissible commands each turn.")
    prompt_layout: Literal["agentenvs", "verl_agent"] = Field(
        "agentenvs",
        description="agentenvs: a system prompt and our observation layout; verl_agent: one "
        "user message per step, no system prompt, the raw first observation, the last "
        "history_window (observation, action) pairs, quoted admissible commands (needs "
        "history=window).",
    )
    first_prompt_template: str | None = Field(
        None, description="verl_agent layout: the first step's prompt (str.format fields)."
    )
    prompt_template: str | None = Field(
        None, description="verl_agent layout: every later step's prompt (str.format fields)."
    )
    system_prompt: str | None = Field(
        None, description="agentenvs layout: replaces our system prompt (used as written)."
    )
    require_think: bool = Field(
        False, description="A reply without <think> and </think> is format-invalid."
    )
    reject_cjk: bool = Field(
        False, description="A reply with Chinese characters is format-invalid (verl-agent)."
    )
    stop_at_action: bool = Field(
        True,
        description="tag protocol: sampling stops at </action> and the turn ends there. False: "
        "no stop string, the whole reply is sampled (to end-of-turn or the per-turn cap) and its "
        "action is read from it, as verl-agent samples and projects (gigpo).",
    )
    action_pick: Literal["last", "first"] = Field(
        "last", description="Which <action> block of a reply is played."
    )
    action_matching: Literal["normalised", "exact"] = Field(
        "normalised",
        description="normalised: case, spacing, a full stop and 'put X in Y' are forgiven; "
        "exact: the lower-cased command must be listed as it is.",
    )
    on_no_action: Literal["hint", "send_tail"] = Field(
        "hint",
        description="A reply with no action: hint (tell the model the form), or send_tail "
        "(play its last 30 characters, as verl-agent does).",
    )
    penalise_inadmissible: bool = Field(
        True,
        description="Also penalise well-formed commands the game rejects (false: only "
        "format-invalid replies pay invalid_action_penalty).",
    )
    success_reward: float = Field(1.0, description="Reward for winning (GiGPO uses 10).")
    invalid_action_penalty: float = Field(
        0.1, ge=0, description="Subtracted for each unparsable or inadmissible action."
    )
    on_env_error: Literal["raise", "end_episode"] = Field(
        "raise",
        description="A dead or stuck engine: raise (the collector retries or fails the group) "
        "or end the episode with stop reason env_error.",
    )
    workers: int = Field(2, ge=1, description="Most engine processes this config may run.")
    engines_per_worker: int = Field(
        8, ge=1, description="Episodes one process hosts at once (one engine each)."
    )
    cache_translations: bool = Field(
        True, description="Memoize Fast Downward's PDDL translation in workers (faster resets)."
    )
    reset_timeout_s: float = Field(180.0, gt=0)
    step_timeout_s: float = Field(60.0, gt=0)
    limits: Limits = Field(default_factory=lambda: Limits(max_turns=50))

    @field_validator("task_types")
    @classmethod
    def _known_task_types(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(TASK_TYPES))
        if unknown or not value:
            raise ValueError(
                f"unknown task type(s) {unknown}; choose from {', '.join(TASK_TYPES)}"
                if unknown
                else "task_types must not be empty"
            )
        return value

    presets: ClassVar[dict[str, dict[str, Any]]] = {"gigpo": GIGPO_PRESET}
    string_table: ClassVar = STRINGS

    @model_validator(mode="after")
    def _protocol_fits_renderer(self) -> ALFWorldConfig:
        if self.protocol == "tool" and self.renderer_kind != "chat":
            raise ValueError("protocol 'tool' needs the chat renderer")
        if self.prompt_layout == "verl_agent" and self.history != "window":
            raise ValueError("prompt_layout 'verl_agent' needs history='window'")
        from agentenvs.envs.alfworld import prompts

        for template in (self.first_prompt_template, self.prompt_template):
            if template is not None:  # fail at config time, not mid-rollout
                prompts.fill_template(template, **dict.fromkeys(prompts.TEMPLATE_FIELDS, ""))
        return self

    # ---- tasks -------------------------------------------------------------------------
    def games(self, split: str = "train"):
        from agentenvs.envs.alfworld.games import data_root, find_games

        games = find_games(str(data_root(self.data)), split, tuple(self.task_types))
        return games[: self.max_games] if self.max_games else games

    def num_tasks(self, split: str = "train") -> int:
        return len(self.games(split))

    def data_sources(self) -> dict[str, str]:
        """The game folder (``json_2.1.1``: every split's game and trajectory files);
        ``auto`` names the folder it resolves to on this machine."""
        from agentenvs.envs.alfworld.games import data_root

        return {"games": str(data_root(self.data))}

    def task_id(self, task_index: int, split: str = "train") -> str:
        return f"{split}/{self.games(split)[task_index].name}"

    def settings(self):
        from agentenvs.envs.alfworld.env import EpisodeSettings

        return EpisodeSettings(
            protocol=self.protocol,
            renderer=self.renderer_kind,
            history=self.history,
            history_window=self.history_window,
            show_admissible=self.show_admissible,
            success_reward=self.success_reward,
            invalid_action_penalty=self.invalid_action_penalty,
            on_env_error=self.on_env_error,
            max_turns=self.limits.max_turns,
            reset_timeout_s=self.reset_timeout_s,
            step_timeout_s=self.step_timeout_s,
            workers=self.workers,
            engines_per_worker=self.engines_per_worker,
            cache_translations=self.cache_translations,
            prompt_layout=self.prompt_layout,
            first_prompt_template=self.first_prompt_template,
            prompt_template=self.prompt_template,
            require_think=self.require_think,
            reject_cjk=self.reject_cjk,
            stop_at_action=self.stop_at_action,
            action_pick=self.action_pick,
            action_matching=self.action_matching,
            on_no_action=self.on_no_action,
            penalise_inadmissible=self.penalise_inadmissible,
            system_prompt=self.system_prompt,
            texts={name: self.text(name) for name in self.string_table.defaults},
        )

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        from agentenvs.envs.alfworld.env import ALFWorldTextEnv

        games = self.games(split)
        if not 0 <= task_index < len(games):
            raise IndexError(
                f"ALFWorld split {split!r} has {len(games)} games, not {task_index + 1}"
            )
        return ALFWorldTextEnv(games[task_index], self.settings())

    def make_env(self, task_index: int, tokenizer: Tokenizer, split: str = "train") -> RenderedEnv:
        from agentenvs.envs.alfworld.env import ALFWorldEnv, WindowRenderer

        renderer = make_renderer(self.renderer_kind, tokenizer)
        if self.history == "window":
            renderer = WindowRenderer(tokenizer, renderer.end_of_turn)
        return ALFWorldEnv(self.make_text_env(task_index, split), renderer, self.limits)

    async def group_rewards(
        self, trajectories: list[Trajectory], envs: Sequence[TextEnv]
    ) -> list[tuple[float, Metrics]]:
        """No extra reward; reports per-episode metrics, success per task type included."""
        return [(0.0, _episode_metrics(env)) for env in envs]

    def logging_tags(self) -> list[str]:
        return [self.env_name]

    def reward_components(self) -> list[RewardIdentity]:
        """The step that scores each action inline (``envs/alfworld/reward.py``)."""
        from agentenvs.envs.alfworld.reward import reward_components

        return reward_components()

    @classmethod
    def demo_overrides(cls) -> dict[str, str]:
        """``agentenvs demo`` plays the shipped games (fast, and the same everywhere)."""
        return {"data": "shipped"}

    # ---- engine processes --------------------------------------------------------------
    def pool(self):
        """The engine pool these settings use (shared with configs that match)."""
        return self.settings().pool()

    def shutdown(self) -> None:
        """Kill and reap this config's engine processes (they restart on next use)."""
        self.pool().close()


def _episode_metrics(env: TextEnv) -> Metrics:
    from agentenvs.envs.alfworld.env import ALFWorldTextEnv

    return env.episode_metrics() if isinstance(env, ALFWorldTextEnv) else {}
