"""How an LLM judge is set up (a config section an environment embeds), and its prompt.

An environment that offers a judged reward has a field ``judge: JudgeSettings | None``
(``None``, the default, leaves its reward as it was). Everything that decides a
verdict is here: the endpoint and model, the prompt file (its sha256 goes into the
records and the cache key), the score range, how the score enters the reward.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from agentenvs.envs.errors import AgentEnvsError

DEFAULT_PROMPT = Path(__file__).with_name("data") / "judge_reference.txt"
"""The shipped prompt: compare a response with a reference answer, score 0 to 10."""

PLACEHOLDERS = ("question", "response", "reference", "rubric")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")


class JudgeSetupError(AgentEnvsError, ValueError):
    """A judge that cannot be used as configured (a missing prompt file, a bad template)."""


class JudgeSettings(BaseModel):
    """An OpenAI-compatible chat endpoint that scores an episode's answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(description="The server root, e.g. http://127.0.0.1:8000 (no /v1).")
    model: str = Field(description="The model name requests carry.")
    prompt_file: str | None = Field(
        None, description="A prompt template file; None takes the shipped reference prompt."
    )
    rubric: str = Field("", description="Text put where the prompt says {rubric}.")
    min_score: float = 0.0
    max_score: float = 10.0
    weight: float = Field(1.0, description="The judged reward is weight * (score scaled to 0..1).")
    combine: Literal["add", "replace"] = Field(
        "add", description="add: env reward + judged reward; replace: the judged reward alone."
    )
    failure_reward: float = Field(
        0.0, description="The judged reward of an episode whose verdict failed."
    )
    temperature: float = 0.0
    max_tokens: int = Field(256, ge=1)
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="Sent with each request as is (e.g. vLLM structured outputs).",
    )
    timeout: float = Field(60.0, gt=0)
    retries: int = Field(3, ge=0, description="Extra attempts after a transient failure.")
    backoff: float = Field(0.5, ge=0, description="Seconds before the first retry; doubles.")
    concurrency: int = Field(8, ge=1, description="Requests in flight at once, per process.")
    cache: Literal["memory", "disk", "off"] = "memory"
    cache_dir: str | None = Field(None, description="Where cache='disk' keeps verdicts.")
    weights_dir: str | None = Field(
        None,
        description="When the judge serves weights of ours: their directory, hashed into the "
        "records and the cache key.",
    )
    api_key_env: str | None = Field(
        None, description="Name of an environment variable holding the API key (never stored)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> JudgeSettings:
        if self.max_score <= self.min_score:
            raise ValueError(f"max_score {self.max_score} must be above min_score {self.min_score}")
        if self.cache == "disk" and not self.cache_dir:
            raise ValueError("cache='disk' needs cache_dir")
        return self

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


class JudgedConfig(BaseModel):
    """Config mixin: an optional LLM judge on each episode's answer.

    With no judge the key is left out of the dump, so a config hashes as it did before
    judges existed and the stores it wrote still resume.
    """

    judge: JudgeSettings | None = Field(
        None,
        description="An LLM judge on each episode's answer (docs/rewards.md); None: no judge.",
    )

    @model_serializer(mode="wrap")
    def _without_unset_judge(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("judge") is None:
            data.pop("judge", None)
        return data


@dataclass(frozen=True)
class JudgePrompt:
    """A prompt template and the sha256 (16 hex digits) of its text."""

    template: str
    sha256: str
    source: str

    @classmethod
    def load(cls, path: str | Path | None = None) -> JudgePrompt:
        file = Path(path) if path is not None else DEFAULT_PROMPT
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as error:
            raise JudgeSetupError(f"cannot read the judge prompt {file}: {error}") from None
        if "{response}" not in text:
            raise JudgeSetupError(f"judge prompt {file} has no {{response}} placeholder")
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        return cls(text, digest, str(file))

    def render(self, values: dict[str, str]) -> str:
        """The template with each ``{name}`` replaced in one pass, so a response that
        contains ``{reference}`` is never expanded into the reference."""
        return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), ""), self.template)
