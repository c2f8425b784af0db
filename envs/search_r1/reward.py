"""Answer scoring: SQuAD-normalised exact match, token F1, and a format-aware variant.

By default the scored answer is the *last* ``<answer>...</answer>`` in the model's own
text (the actions of the episode, never the retrieved passages); ``answer_scope=
prompt_and_response`` applies Search-R1's own rule instead (see :data:`AnswerScope`). Normalisation
is SQuAD's: lower-case, drop punctuation, drop the articles a/an/the, collapse
whitespace. A prediction is right when it matches any golden answer.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from agentenvs.envs.rewards.identity import RewardIdentity, identify, identity_of, reward_function

if TYPE_CHECKING:
    from agentenvs.envs.rewards.judge_settings import JudgeSettings

RewardMode = Literal["em", "f1", "format"]
AnswerScope = Literal["actions", "prompt_and_response"]
"""Where the scored ``<answer>`` is looked for: ``actions``, the model's own text (ours);
``prompt_and_response``, Search-R1's rule: the prompt, the actions and the retrieved
blocks in order, and an answer only when that text holds at least two blocks."""

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    text = text.lower().translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def extract_answer(response: str, *, min_blocks: int = 1) -> str | None:
    """The content of the last ``<answer>`` block, stripped; None when there are fewer
    than ``min_blocks`` blocks (Search-R1 asks for two over prompt+response:
    ``qa_em.extract_solution``, so a prompt's own example block is never the answer
    alone)."""
    matches = _ANSWER.findall(response)
    return matches[-1].strip() if len(matches) >= max(1, min_blocks) else None


def exact_match(prediction: str, golden: Sequence[str]) -> float:
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golden))


def token_f1(prediction: str, golden: Sequence[str]) -> float:
    """The best SQuAD token F1 of ``prediction`` against any golden answer."""
    pred_tokens = normalize_answer(prediction).split()
    best = 0.0
    for answer in golden:
        gold_tokens = normalize_answer(answer).split()
        common = Counter(pred_tokens) & Counter(gold_tokens)
        overlap = sum(common.values())
        if overlap == 0:
            continue
        precision = overlap / len(pred_tokens)
        recall = overlap / len(gold_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


@dataclass(frozen=True)
class Score:
    reward: float
    answer: str | None
    em: float
    f1: float
    well_formed: bool


@reward_function("score", "1", depends=(extract_answer, exact_match, token_f1, normalize_answer))
def score_response(
    response: str,
    golden: Sequence[str],
    *,
    mode: RewardMode = "em",
    well_formed: bool = True,
    format_weight: float = 0.2,
    min_blocks: int = 1,
) -> Score:
    """Score an episode's text.

    ``em`` and ``f1`` give the match itself. ``format`` rewards the protocol too:
    1 for a right answer in a well-formed episode, ``1 - format_weight`` for a right
    answer in a malformed one, ``format_weight`` for a wrong answer in a well-formed
    one, and 0 otherwise (this project's own weighting, in the spirit of Search-R1's
    format-aware reward).
    """
    answer = extract_answer(response, min_blocks=min_blocks)
    em = exact_match(answer, golden) if answer is not None else 0.0
    f1 = token_f1(answer, golden) if answer is not None else 0.0
    formed = well_formed and answer is not None
    if mode == "em":
        reward = em
    elif mode == "f1":
        reward = f1
    elif mode == "format":
        if em:
            reward = 1.0 if formed else 1.0 - format_weight
        else:
            reward = format_weight if formed else 0.0
    else:  # pragma: no cover - pydantic rejects other modes first
        raise ValueError(f"unknown reward mode {mode!r}")
    return Score(reward=reward, answer=answer, em=em, f1=f1, well_formed=formed)


def reward_components(judge: JudgeSettings | None) -> list[RewardIdentity]:
    """Search-R1's reward components: the answer score (its ``reward`` mode is in the
    env config), the env's final step, which picks the text the score reads, and the
    judge when one is set (what ``SearchR1Config.reward_components`` declares)."""
    from agentenvs.envs.search_r1.env import SearchR1Env

    components = [
        identity_of(score_response),
        identify(SearchR1Env._finish, "final_step", "1", depends=(SearchR1Env.scored_text,)),
    ]
    if judge is not None:
        from agentenvs.envs.rewards.judge import judge_identity

        components.append(judge_identity(judge))
    return components


def judge_input(env: Any) -> Any:
    """What a judge reads of a finished Search-R1 episode: the question, the model's own
    actions (never the retrieved passages), and the golden answers as the reference."""
    from agentenvs.envs.rewards.judge import JudgeInput

    reference = " | ".join(env.task.golden_answers)
    return JudgeInput(env.task.question, "".join(env.actions), reference)
