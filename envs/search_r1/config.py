"""SearchR1Config: the registered configuration of the Search-R1 environment.

``agentenvs.envs.make("search_r1", protocol="tool_call", retriever={"kind": "http",
"url": "http://127.0.0.1:8000/retrieve"})`` gives a config whose ``dataset(tokenizer,
group_size=G)`` yields GRPO groups: G copies of one question each.

Observation length is capped in tokens of the policy's own tokenizer: the config
receives the tokenizer in :meth:`make_env` and counts exactly what the renderer will
append. Text-only use (the gymnasium wrapper, :meth:`make_text_env`) has no tokenizer,
so there the cap is estimated as ``chars_per_token`` characters per token.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.rendered import Limits, RenderedEnv
from agentenvs.envs.renderers import RendererKind, Tokenizer, make_renderer
from agentenvs.envs.search_r1.data import QATask, load_tasks, shipped_tasks
from agentenvs.envs.search_r1.env import SearchR1Env
from agentenvs.envs.search_r1.protocol import (
    Protocol,
    TokenCounter,
    approximate_counter,
    tokenizer_counter,
)
from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig
from agentenvs.envs.search_r1.reward import RewardMode


class SearchR1Config(EnvConfig):
    """Search-R1: reason, search a corpus, answer (exact-match reward)."""

    env_name: ClassVar[str] = "search_r1"
    gym_name: ClassVar[str] = "SearchR1"
    default_renderer: ClassVar[RendererKind] = "continuation"

    protocol: Protocol = Field(
        "tags",
        description="tags: Search-R1's <search>/<information>/<answer> under the continuation "
        "renderer; tool_call: verl's search tool (query_list) under the chat renderer.",
    )
    retriever: RetrieverConfig = Field(default_factory=RetrieverConfig)
    max_turns: int = Field(
        4,
        ge=0,
        description="Turns that may search (invalid actions count); one answer turn follows.",
    )
    max_obs_tokens: int | None = Field(
        500, ge=1, description="Longest observation in tokens (Search-R1's max_obs_length)."
    )
    chars_per_token: float = Field(
        4.0, gt=0, description="Estimate for the cap when no tokenizer is at hand."
    )
    max_queries_per_turn: int = Field(3, ge=1, description="tool_call: queries searched per turn.")
    reward: RewardMode = Field("em", description="em, f1, or format (protocol-aware em).")
    format_weight: float = Field(0.2, ge=0, le=1, description="format reward's weight.")
    train_file: str | None = Field(
        None, description="Questions (JSONL/JSON/parquet); None: shipped."
    )
    test_file: str | None = Field(None, description="Test questions; None: shipped.")
    prompt_template: str | None = Field(
        None, description="User prompt with a {question} field; None: the protocol's default."
    )
    system_prompt: str | None = None
    on_retrieval_error: Literal["raise", "end"] = Field(
        "raise",
        description="raise: fail the rollout (the collector retries or reports the group); "
        "end: finish the episode with stop reason retrieval_error and reward 0.",
    )

    @model_validator(mode="after")
    def _check(self) -> SearchR1Config:
        if "limits" not in self.model_fields_set:
            self.limits = Limits(max_turns=self.max_turns + 1)
        elif self.limits.max_turns < self.max_turns + 1:
            raise ValueError(
                f"limits.max_turns ({self.limits.max_turns}) must leave room for max_turns "
                f"({self.max_turns}) search turns plus the answer turn"
            )
        if self.prompt_template is not None and "{question}" not in self.prompt_template:
            raise ValueError("prompt_template must contain a {question} field")
        return self

    @property
    def renderer_kind(self) -> RendererKind:
        if self.renderer is not None:
            return self.renderer
        return "chat" if self.protocol == "tool_call" else "continuation"

    # ---- tasks ------------------------------------------------------------------------
    def tasks(self, split: str = "train") -> list[QATask]:
        path = self.train_file if split == "train" else self.test_file
        return load_tasks(path) if path else shipped_tasks(split)

    def num_tasks(self, split: str = "train") -> int:
        return len(self.tasks(split))

    def task_id(self, task_index: int, split: str = "train") -> str:
        return f"{split}/{self.tasks(split)[task_index].id}"

    # ---- envs -------------------------------------------------------------------------
    def make_search_env(
        self, task_index: int, split: str = "train", count_tokens: TokenCounter | None = None
    ) -> SearchR1Env:
        task = self.tasks(split)[task_index]
        return SearchR1Env(task, self, count_tokens or approximate_counter(self.chars_per_token))

    def make_text_env(self, task_index: int, split: str = "train") -> SearchR1Env:
        return self.make_search_env(task_index, split)

    def make_env(self, task_index: int, tokenizer: Tokenizer, split: str = "train") -> RenderedEnv:
        renderer = make_renderer(self.renderer_kind, tokenizer)
        task = self.make_search_env(task_index, split, tokenizer_counter(tokenizer))
        return RenderedEnv(task, renderer, self.limits)
