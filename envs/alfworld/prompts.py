"""What the model reads: the system prompt and each turn's observation text."""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentenvs.envs.alfworld.actions import TOOL_ACTION_DESCRIPTION, TOOL_DESCRIPTION, Protocol
from agentenvs.envs.strings import StringTable

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


# ---- the verl_agent layout: one user message per step, a window of (observation, action)
FIRST_TEMPLATE = (
    "{current_observation}\n\n"
    "Commands you can send now:\n {admissible_actions}\n\n"
    "Reason between <think> and </think>, then give exactly one command between <action> "
    "and </action>."
)
"""Our wording of the first-step prompt; fields as verl-agent's template names them."""

STEP_TEMPLATE = (
    "Task: {task_description}\n"
    "Steps taken so far: {step_count}. The last {history_length}, as (observation, action):\n"
    "{action_history}\n"
    "Step {current_step}. What you see now: {current_observation}\n\n"
    "Commands you can send now:\n {admissible_actions}\n\n"
    "Reason between <think> and </think>, then give exactly one command between <action> "
    "and </action>."
)
"""Our wording of the later-step prompt (``prompt_template`` replaces it)."""

TEMPLATE_FIELDS = (
    "task_description",
    "step_count",
    "history_length",
    "action_history",
    "current_step",
    "current_observation",
    "admissible_actions",
)


def quoted_admissible(admissible: list[str]) -> str:
    """verl-agent's list (``build_text_obs``): quoted, one a line, ``help`` left out."""
    return "\n ".join(f"'{command}'" for command in admissible if command != "help")


def task_description(first_feedback: str) -> str:
    """What follows ``Your task is to: `` in the first observation (verl-agent's
    ``extract_task``), or the empty string."""
    marker = "Your task is to: "
    start = first_feedback.find(marker)
    return first_feedback[start + len(marker) :].strip() if start >= 0 else ""


def history_lines(memory: list[tuple[str, str]], window: int) -> tuple[str, int]:
    """The last ``window`` (observation, action) pairs, numbered from the episode start,
    in verl-agent's ``SimpleMemory.fetch`` layout; and how many were shown."""
    recent = memory[-window:] if window else []
    first = len(memory) - len(recent)
    lines = [
        f"[Observation {first + i + 1}: '{obs}', Action {first + i + 1}: '{act}']"
        for i, (obs, act) in enumerate(recent)
    ]
    return "\n".join(lines), len(recent)


def fill_template(template: str, **fields: object) -> str:
    """``str.format`` with named fields; unknown fields are a config error, said plainly."""
    try:
        return template.format(**fields)
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(
            f"ALFWorld prompt template cannot be filled ({err!r}); its fields are "
            f"{', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)} (double other braces)"
        ) from None


STRINGS = StringTable(
    defaults={
        "format_hint": FORMAT_HINT["tag"],
        "format_hint_tool": FORMAT_HINT["tool"],
        "tool_description": TOOL_DESCRIPTION,
        "tool_action_description": TOOL_ACTION_DESCRIPTION,
    },
    field_names=frozenset({"system_prompt", "first_prompt_template", "prompt_template"}),
)
"""Every text of ours the model can read, by the name a strings file gives it
(docs/alfworld.md); the game's own text (``Nothing happens.``) is the engine's."""
