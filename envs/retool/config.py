"""ReToolConfig: the registered ``retool`` environment (gymnasium ``agentenvs/ReTool-v0``).

Defaults and why:

* ``protocol="retool"`` with the continuation renderer: the paper's own format;
  ``tool_call`` switches to verl's Hermes tool calls and the chat renderer.
* ``execution="stateless"``: each snippet runs in a fresh process, as in ReTool's
  evaluation and verl's SandboxFusion tool, so ReTool-style models (trained on
  self-contained snippets) see the semantics they expect, a hostile or broken
  cell cannot poison later ones, and no worker is held for the whole episode.
  ``stateful`` keeps one sandbox session per episode (variables persist).
* ``truncation="auto"``: ReTool's head+tail cut for the ReTool protocol, verl's
  256-character middle cut for tool calls.
* Rewards +1/-1 graded by ``math-verify``; shaping off.

Only configuration lives here (the model is picklable and cheap); the sandbox is
shared per process and made on first use, problems are read once per file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.rendered_env import Limits, RenderedEnv
from agentenvs.envs.renderers import RendererKind, Tokenizer, make_renderer
from agentenvs.envs.requirements import Requirement, extra
from agentenvs.envs.retool.output import ErrorDetail, OutputPolicy, ToolOutput
from agentenvs.envs.retool.problems import SHIPPED_PROBLEMS, DataFormat, Problem, load_problems
from agentenvs.envs.retool.prompts import STRINGS
from agentenvs.envs.retool.protocol import Protocol
from agentenvs.envs.retool.reward import Grader, judge_input, pass_at_k
from agentenvs.envs.rewards.judge_settings import JudgedConfig
from agentenvs.envs.rewards.judged_env import judged, unwrap
from agentenvs.envs.strings import SettableStrings
from agentenvs.envs.text import TextEnv
from agentenvs.envs.types import Metrics, Trajectory
from agentenvs.sandbox.base import SandboxConfig

if TYPE_CHECKING:
    from agentenvs.envs.rewards.identity import RewardIdentity

VERL_RETOOL_PRESET: dict[str, Any] = {
    # verl's ReTool recipe (recipe/retool: retool.py, run_qwen2_7b_dapo.sh,
    # sandbox_fusion_tool_config.yaml), verl/utils/reward_score/math_dapo.py and the
    # tool agent loop; docs/retool.md has the table with each value's source.
    "protocol": "tool_call",
    "execution": "stateless",
    "timeout": 30.0,
    "memory_limit_mb": 1024,
    "error_detail": "traceback",
    "tool_output": "verl",
    "call_rules": "verl",
    "print_last_line": True,
    "max_parallel_calls": 1,
    "max_tool_calls": 16,
    "truncation": "middle",
    "middle_max_chars": 256,
    "on_no_answer": "end",
    "grader": "strict_box",
    "grader_scope": "whole_response",
    "correct_reward": 1.0,
    "incorrect_reward": -1.0,
    "tool_shaping": True,
    "tool_shaping_per_call": 0.1,
    "tool_shaping_cap": 0.4,
    # One response budget of 16384 tokens for the whole episode, the model's and the
    # tools' tokens together; no per-turn cap (each turn may use the rest).
    "limits": {"max_turns": 16, "on_truncated_action": "pass", "max_response_tokens": 16384},
}

EVAL_SPLITS = frozenset({"test", "eval", "validation", "val"})
_PROTOCOL_RENDERER: dict[str, RendererKind] = {"retool": "continuation", "tool_call": "chat"}


class ReToolConfig(EnvConfig, SettableStrings, JudgedConfig):
    """Math with a sandboxed Python interpreter (ReTool); answers graded in \\boxed{}."""

    env_name: ClassVar[str] = "retool"
    gym_name: ClassVar[str] = "ReTool"
    splits: ClassVar[tuple[str, ...]] = ("train", *sorted(EVAL_SPLITS))
    default_renderer: ClassVar[RendererKind] = "continuation"
    requires: ClassVar[tuple[Requirement, ...]] = extra("retool", "math_verify")
    """The default grader's; :meth:`requirements` adds a docker sandbox's client."""

    deterministic: ClassVar[bool] = True
    replay_volatile: ClassVar[frozenset[str]] = frozenset({"sandbox_seconds"})

    protocol: Protocol = Field(
        "retool", description="retool: <code>/<interpreter> text; tool_call: Hermes tool calls."
    )
    # ---- data ---------------------------------------------------------------------
    data_path: str | None = Field(
        None, description="JSONL or parquet of problems; None uses the shipped set."
    )
    data_format: DataFormat = "auto"
    eval_data_path: str | None = Field(
        None, description="Problems for the test/eval split (default: data_path)."
    )
    max_problems: int | None = Field(None, ge=1, description="Use only the first N problems.")
    # ---- prompt -------------------------------------------------------------------
    prompt_template: str | None = Field(
        None, description="The user turn; {question} marks where the problem goes."
    )
    system_prompt: str | None = Field(
        None, description="Replaces the protocol's system prompt; '' drops it."
    )
    # ---- execution ----------------------------------------------------------------
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    execution: Literal["stateless", "stateful"] = "stateless"
    timeout: float = Field(10.0, gt=0, description="Wall seconds per code execution.")
    memory_limit_mb: int = Field(
        1024, ge=32, description="Per stateless execution (sessions use sandbox.memory_limit_mb)."
    )
    max_tool_calls: int = Field(8, ge=0, description="Code executions per episode.")
    on_max_tool_calls: Literal["end", "refuse"] = Field(
        "end", description="end the episode, or refuse the call and ask for the answer."
    )
    print_last_line: bool = Field(
        False,
        description="Wrap the code's last non-empty line in print() unless it starts with "
        "print (verl's ReTool tool).",
    )
    max_parallel_calls: int | None = Field(
        None, ge=1, description="Tool calls of one turn that run; the rest are ignored."
    )
    code_at_eos: Literal["final", "run"] = Field(
        "final",
        description="retool protocol, a turn that ended with end-of-turn (not on </code>) "
        "but holds a code block: final grades it as the answer turn, as the original (which "
        "only runs code when generation stops on </code>); run executes the block and "
        "generation continues after the end-of-turn token.",
    )
    sandbox_retries: int = Field(
        1, ge=0, description="Retries of a stateless run when the sandbox itself failed."
    )
    # ---- what the model reads back ----------------------------------------------------
    truncation: Literal["auto", "head_tail", "middle", "tokens", "none"] = "auto"
    head_tail_chars: int = Field(200, ge=1)
    middle_max_chars: int = Field(256, ge=2)
    max_output_tokens: int = Field(256, ge=2)
    error_detail: ErrorDetail = "last_line"
    tool_output: ToolOutput = Field(
        "agentenvs",
        description="agentenvs: stdout then the error, a hint when silent, our limit texts; "
        "verl: stdout + stderr as they are, '' when silent, one fixed text on a timeout.",
    )
    call_rules: Literal["agentenvs", "verl"] = Field(
        "agentenvs",
        description="tool_call protocol. agentenvs: any unusable call is a malformed action "
        "(on_malformed). verl: calls whose JSON cannot be read (or lacks name/arguments) are "
        "skipped (no call left: the turn is final); an unknown tool or a call without code "
        "gets the tool_error text and the episode goes on; code is taken from its first "
        "```python fence, an empty program runs.",
    )
    # ---- malformed actions ------------------------------------------------------------
    on_malformed: Literal["continue", "end"] = Field(
        "continue", description="After an unreadable or empty code block."
    )
    malformed_penalty: float = Field(0.0, description="Added per malformed action.")
    on_no_answer: Literal["end", "continue"] = Field(
        "end", description="When a turn ends with neither a tool call nor a \\boxed{} answer."
    )
    no_answer_penalty: float = Field(0.0, description="Added when an episode ends with no box.")
    # ---- reward -------------------------------------------------------------------
    grader: Grader = "math_verify"
    grader_scope: Literal["model_text", "whole_response"] = Field(
        "model_text",
        description="What the grader reads: the model's own text, or the whole decoded "
        "response with the interpreter's outputs (verl's solution_str).",
    )
    correct_reward: float = 1.0
    incorrect_reward: float = -1.0
    tool_shaping: bool = Field(
        False, description="verl recipe: wrong answers lose less per tool call, capped."
    )
    tool_shaping_per_call: float = 0.1
    tool_shaping_cap: float = 0.4
    pass_k: list[int] = Field(default_factory=lambda: [1, 4, 8])
    limits: Limits = Field(default_factory=lambda: Limits(max_turns=10))

    presets: ClassVar[dict[str, dict[str, Any]]] = {"verl_retool": VERL_RETOOL_PRESET}
    string_table: ClassVar = STRINGS

    @model_validator(mode="after")
    def _consistent(self) -> ReToolConfig:
        wanted = _PROTOCOL_RENDERER[self.protocol]
        if self.renderer is not None and self.renderer != wanted:
            raise ValueError(
                f"protocol {self.protocol!r} needs the {wanted!r} renderer, not {self.renderer!r}"
            )
        unset = {"truncation_reward", "overflow_reward"} - self.limits.model_fields_set
        if unset:
            # An action cut off by the token cap, or an episode ended by the context
            # budget, earns what a wrong answer earns: running out never beats answering.
            limits = self.limits.model_dump(exclude_unset=True)
            limits.update(dict.fromkeys(unset, self.incorrect_reward))
            object.__setattr__(self, "limits", Limits(**limits))
        return self

    @property
    def renderer_kind(self) -> RendererKind:
        return _PROTOCOL_RENDERER[self.protocol]

    @property
    def action_protocol(self) -> str:
        return self.protocol

    def output_policy(self) -> OutputPolicy:
        truncation = self.truncation
        if truncation == "auto":
            truncation = "head_tail" if self.protocol == "retool" else "middle"
        return OutputPolicy(
            truncation=truncation,
            head_tail_chars=self.head_tail_chars,
            middle_max_chars=self.middle_max_chars,
            max_output_tokens=self.max_output_tokens,
            error_detail=self.error_detail,
            empty_output=self.text("empty_output"),
            style=self.tool_output,
            timeout_output=self.text("timeout_output"),
        )

    # ---- tasks --------------------------------------------------------------------
    def problems(self, split: str = "train") -> list[Problem]:
        if split != "train" and split not in EVAL_SPLITS:
            known = ", ".join(["train", *sorted(EVAL_SPLITS)])
            raise ValueError(f"unknown split {split!r}; retool has {known}")
        path = self.data_path
        if split in EVAL_SPLITS and self.eval_data_path:
            path = self.eval_data_path
        problems = load_problems(path, self.data_format)
        return problems[: self.max_problems] if self.max_problems else problems

    def requirements(self) -> tuple[Requirement, ...]:
        """``math_verify`` when it grades, the docker client for a docker sandbox."""
        grading = self.requires if self.grader == "math_verify" else ()
        docker = extra("docker", "docker") if self.sandbox.backend == "docker" else ()
        return grading + docker

    def num_tasks(self, split: str = "train") -> int:
        return len(self.problems(split))

    def data_sources(self) -> dict[str, str]:
        """The training problems and the evaluation problems (the same file unless
        ``eval_data_path`` names another)."""
        train = str(self.data_path or SHIPPED_PROBLEMS)
        return {"problems/train": train, "problems/eval": str(self.eval_data_path or train)}

    def task_id(self, task_index: int, split: str = "train") -> str:
        problem = self.problems(split)[task_index]
        return f"{split}/{problem.id or task_index}"

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        return self._text_env(task_index, split, None)

    def make_env(self, task_index: int, tokenizer: Tokenizer, split: str = "train") -> RenderedEnv:
        # As EnvConfig.make_env, but the task gets the tokenizer (token-budget truncation).
        renderer = make_renderer(self.renderer_kind, tokenizer)
        task = self._text_env(task_index, split, tokenizer)
        return RenderedEnv(task, renderer, self.limits)

    def _text_env(self, task_index: int, split: str, tokenizer: Tokenizer | None) -> TextEnv:
        from agentenvs.envs.retool.env import ReToolEnv

        problems = self.problems(split)
        if not 0 <= task_index < len(problems):
            raise IndexError(f"task {task_index} out of range ({len(problems)} problems)")
        env = ReToolEnv(problems[task_index], self, tokenizer)  # type: ignore[arg-type]
        return judged(env, self.judge, judge_input)

    # ---- rewards and replay ----------------------------------------------------------
    def reward_components(self) -> list[RewardIdentity]:
        """The grader, the outcome shaping, the final step's penalties, the judge."""
        from agentenvs.envs.retool.reward import reward_components

        return reward_components(self.judge)

    def replay_refusal(self) -> str | None:
        """An LLM judge answers from outside this process; the code runs again in the
        sandbox, whose output the record's observations must show again."""
        if self.judge is not None:
            return "retool is judged by an LLM: its verdicts are not replayed"
        return super().replay_refusal()

    # ---- group metrics --------------------------------------------------------------
    async def group_rewards(
        self, trajectories: list[Trajectory], envs: Sequence[TextEnv]
    ) -> list[tuple[float, Metrics]]:
        """No group reward; pass@k and how often the tool was used, as group metrics."""
        from agentenvs.envs.retool.env import ReToolEnv

        episodes = [unwrap(env) for env in envs if isinstance(unwrap(env), ReToolEnv)]
        n = len(episodes)
        metrics: Metrics = {}
        if n:
            correct = sum(1 for env in episodes if env.correct)
            for k in sorted({k for k in self.pass_k if 1 <= k <= n} | {n}):
                metrics[f"pass@{k}"] = pass_at_k(n, correct, k)
            metrics["tool_use_rate"] = sum(1 for env in episodes if env.tool_calls) / n
            metrics["mean_tool_calls"] = sum(env.tool_calls for env in episodes) / n
        return [(0.0, dict(metrics)) for _ in trajectories]
