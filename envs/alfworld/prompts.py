"""What the model reads: the system prompt and each turn's observation text."""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentenvs.envs.alfworld.actions import Protocol

_TASK = re.compile(r"Your task is to:\s*(.+?)\s*$", re.DOTALL)
_BANNER = re.compile(r"^-=.*?=-\s*", re.DOTALL)


@dataclass(frozen=True)
class Intro:
    """The game's opening text split into the room description and the goal."""

    scene: str
    goal: str


def split_intro(feedback: str) -> Intro:
    text = _BANNER.sub("", feedback.strip())
    match = _TASK.search(text)
    if match is None:
        return Intro(scene=text.strip(), goal="")
    goal = match.group(1).strip().rstrip(".")
    return Intro(scene=text[: match.start()].strip(), goal=goal)


def system_prompt(protocol: Protocol, max_turns: int) -> str:
    how = (
        "Think it through if that helps, then write exactly one action between <action> and "
        "</action>, for example <action>go to countertop 1</action>."
        if protocol == "tag"
        else "Act only by calling the alfworld_step tool with one command, for example "
        '{"action": "go to countertop 1"}; each call returns what happens.'
    )
    return (
        "You are a robot doing chores in a house that you perceive only through text. "
        "Each turn you are told what you see and, when it is shown, the list of commands the "
        f"game accepts right now. {how} Commands outside that list do nothing and are penalised. "
        f"You have at most {max_turns} actions to finish the task."
    )


def admissible_line(admissible: list[str]) -> str:
    return "Commands available now: [" + ", ".join(admissible) + "]"


def first_observation(intro: Intro, admissible: list[str] | None) -> str:
    parts = [f"Task: {intro.goal}." if intro.goal else "", intro.scene]
    if admissible is not None:
        parts.append(admissible_line(admissible))
    return "\n\n".join(p for p in parts if p)


def step_observation(feedback: str, admissible: list[str] | None) -> str:
    parts = [feedback.strip()]
    if admissible is not None:
        parts.append(admissible_line(admissible))
    return "\n\n".join(parts)


FORMAT_HINT = {
    "tag": "I could not find an action in your reply. Write one command as <action>...</action>.",
    "tool": "I could not find an alfworld_step tool call in your reply. Call the tool with one "
    'command, e.g. {"action": "look"}.',
}


def window_observation(
    intro: Intro,
    earlier: list[tuple[str, str]],
    steps_taken: int,
    last_action: str,
    feedback: str,
    admissible: list[str] | None,
) -> str:
    """The whole prompt of a sliding-window turn: goal, start, a few earlier steps, now."""
    parts = [f"Task: {intro.goal}." if intro.goal else "", f"At the start: {intro.scene}"]
    if earlier:
        first = steps_taken - len(earlier)
        lines = [f"{len(earlier)} earlier action(s) and what they did:"]
        lines += [
            f"[{first + i}] {action} -> {result}" for i, (action, result) in enumerate(earlier)
        ]
        parts.append("\n".join(lines))
    parts.append(f"Action {steps_taken}: {last_action}\nNow: {feedback.strip()}")
    if admissible is not None:
        parts.append(admissible_line(admissible))
    return "\n\n".join(p for p in parts if p)


def wrap_continuation(text: str) -> str:
    """Observation text appended inside the assistant turn (continuation renderer)."""
    return f"\n<observation>\n{text}\n</observation>\n"
