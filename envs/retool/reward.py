"""Grading the final answer, and the group metrics ReTool reports.

Two graders:

* ``math_verify``: the last ``\\boxed{...}`` of the model's text is compared with
  the ground truth for mathematical equivalence by Hugging Face's ``math-verify``
  (``1/2`` equals ``0.5`` equals ``\\frac{1}{2}``).
* ``strict_box``: DAPO's strict box check: the last ``\\boxed{...}`` within the
  final 100 characters (of the final 300) must equal the ground truth string
  exactly. Cheap and unforgiving, as in verl's ReTool recipe.

Optional shaping follows verl's ReTool recipe: a wrong answer is punished less
the more code-interpreter rounds the model tried (0.1 per call by default), capped
(at 0.4, i.e. from -1 up to -0.6), which nudges a cold model towards using the tool.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from agentenvs.envs.rewards.identity import RewardIdentity, identify, identity_of, reward_function

if TYPE_CHECKING:
    from agentenvs.envs.rewards.judge_settings import JudgeSettings

Grader = Literal["math_verify", "strict_box"]

logger = logging.getLogger(__name__)

_BOX = "\\boxed"


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (braces balanced), or None."""
    start = text.rfind(_BOX + "{")
    while start >= 0:
        depth = 0
        for index in range(start + len(_BOX), len(text)):
            char = text[index]
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    return text[start + len(_BOX) + 1 : index]
        # Unbalanced: an earlier, complete box may still be the answer.
        start = text.rfind(_BOX + "{", 0, start)
    return None


def dapo_last_boxed(text: str) -> str | None:
    """The last ``\\boxed{`` only, as DAPO's ``last_boxed_only_string`` reads it.

    Unlike :func:`last_boxed`, an unbalanced last box is no answer at all: there is
    no falling back to an earlier, complete one.
    """
    start = text.rfind(_BOX + "{")
    if start < 0:
        return None
    depth = 0
    for index in range(start + len(_BOX), len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return text[start + len(_BOX) + 1 : index]
    return None


def strict_box_correct(text: str, ground_truth: str) -> tuple[bool, str | None]:
    """DAPO's strict check (``math_dapo.compute_score`` with ``strict_box_verify``): the
    last box of the final 100 of the final 300 characters, matched as a string."""
    tail = text[-300:][-100:]
    predicted = dapo_last_boxed(tail)
    return (predicted is not None and predicted == ground_truth), predicted


def math_verify_correct(predicted: str, ground_truth: str) -> bool:
    """Mathematical equivalence of two answer strings by ``math-verify``.

    ``math-verify`` bounds its own run time with SIGALRM, which only works on the
    main thread; elsewhere it runs unbounded (the inputs are short boxed strings).
    """
    from math_verify import parse, verify  # lazy: sympy/antlr load takes a moment

    main = threading.current_thread() is threading.main_thread()
    timeout = 5 if main else None
    try:
        gold = parse(f"\\boxed{{{ground_truth}}}", parsing_timeout=timeout) or parse(
            ground_truth, parsing_timeout=timeout
        )
        target = parse(f"\\boxed{{{predicted}}}", parsing_timeout=timeout)
        if not gold or not target:
            return predicted.strip() == ground_truth.strip()
        return bool(verify(gold, target, timeout_seconds=timeout))
    except Exception:  # a grader crash on odd input is a wrong answer, not an env crash
        logger.debug("math-verify failed on %r vs %r", predicted, ground_truth, exc_info=True)
        return predicted.strip() == ground_truth.strip()


@dataclass(frozen=True)
class Grade:
    correct: bool
    predicted: str | None
    """The extracted answer, None when the text has no box."""


@reward_function(
    "correct",
    "1",
    depends=(last_boxed, dapo_last_boxed, strict_box_correct, math_verify_correct),
    packages=("math-verify",),
)
def grade(text: str, ground_truth: str, grader: Grader = "math_verify") -> Grade:
    if grader == "strict_box":
        correct, predicted = strict_box_correct(text, ground_truth)
        return Grade(correct, predicted)
    predicted = last_boxed(text)
    if predicted is None:
        return Grade(False, None)
    return Grade(math_verify_correct(predicted, ground_truth), predicted)


@reward_function("shaped_reward", "1")
def shaped_reward(
    correct: bool,
    *,
    correct_reward: float,
    incorrect_reward: float,
    tool_calls: int,
    shaping: bool,
    per_call: float,
    cap: float,
) -> float:
    """Outcome reward, with verl-recipe shaping of wrong answers when enabled."""
    if correct:
        return correct_reward
    if not shaping:
        return incorrect_reward
    return incorrect_reward + min(cap, per_call * max(0, tool_calls))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al. 2021)."""
    if k <= 0 or k > n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def reward_components(judge: JudgeSettings | None) -> list[RewardIdentity]:
    """ReTool's reward components: the grader, the outcome shaping, the env's final
    step that adds the penalties, and the judge when one is set (what
    ``ReToolConfig.reward_components`` declares)."""
    from agentenvs.envs.retool.env import ReToolEnv

    components = [
        identity_of(grade),
        identity_of(shaped_reward),
        identify(ReToolEnv._finish, "final_step", "1"),
    ]
    if judge is not None:
        from agentenvs.envs.rewards.judge import judge_identity

        components.append(judge_identity(judge))
    return components


def judge_input(env: Any) -> Any:
    """What a judge reads of a finished ReTool episode: the problem, the text the
    grader reads, and the ground truth as the reference."""
    from agentenvs.envs.rewards.judge import JudgeInput

    return JudgeInput(env.problem.question, env.graded_text(), env.problem.answer)
