"""Prompt texts written for this project, one per protocol and execution mode.

Users replace the user turn with ``prompt_template`` (``{question}`` marks where
the problem goes; other braces, such as ``\\boxed{}``, are left alone) and the
system turn with ``system_prompt`` (an empty string drops it).
"""

from __future__ import annotations

from agentenvs.envs.retool.protocol import Protocol
from agentenvs.envs.strings import StringTable

QUESTION_SLOT = "{question}"

_STATE_NOTE = {
    "stateless": "Every snippet runs in a fresh interpreter, so define everything it uses.",
    "stateful": "Snippets share one interpreter for this problem: names you define stay "
    "available to later snippets.",
}

_RETOOL_SYSTEM = (
    "You solve math problems and may check your reasoning by running Python.\n"
    "To run code, write a block exactly like this and stop:\n"
    "<code>\n```python\nprint(6 * 7)\n```\n</code>\n"
    "Its printed output is then shown to you between <interpreter> and </interpreter>, "
    "and you continue from there. {state} Python's standard library, numpy and sympy "
    "are available; print every value you want to see.\n"
    "Finish with the final answer in the form <answer>\\boxed{{...}}</answer>."
)

_TOOL_CALL_SYSTEM = (
    "You solve math problems and may check your reasoning by running Python with the "
    "code_interpreter tool; its printed output comes back to you. {state} Python's "
    "standard library, numpy and sympy are available; print every value you want to see.\n"
    "When you are done, reply without a tool call and put the final answer in \\boxed{{...}}."
)

DEFAULT_USER_TEMPLATE = "Problem: {question}"

TOOL_DESCRIPTION = (
    "Run a Python program in a sandbox and return what it printed (or the error). "
    "Numpy and sympy are installed; there is no network."
)

NO_ANSWER_NUDGE = "No final answer was given. Continue, and end with the answer in \\boxed{...}."

MAX_CALLS_NOTE = "The code interpreter may not be used again; give the final answer now."

CODE_DESCRIPTION = "Python source to run."

EMPTY_OUTPUT = "(no output; print() the values you want to see)"

TIMEOUT_OUTPUT = "(no output: the program was stopped at its time limit)"
"""Under ``tool_output=verl``: the one text a timed-out run returns (verl returns a fixed
text of its own there, without the run's partial output)."""

TOOL_ERROR = "The tool call could not be run: {error}"
"""Under ``call_rules=verl``: the tool message for a call to an unknown tool or without
code (``{error}`` says which); the episode goes on, as in verl's tool agent loop."""

STRINGS = StringTable(
    defaults={
        "tool_description": TOOL_DESCRIPTION,
        "code_description": CODE_DESCRIPTION,
        "empty_output": EMPTY_OUTPUT,
        "timeout_output": TIMEOUT_OUTPUT,
        "tool_error": TOOL_ERROR,
        "no_answer_nudge": NO_ANSWER_NUDGE,
        "max_calls_note": MAX_CALLS_NOTE,
    },
    field_names=frozenset({"system_prompt", "prompt_template"}),
)
"""Every text the model can read, by the name a strings file gives it (docs/retool.md)."""


def system_prompt(protocol: Protocol, execution: str) -> str:
    template = _RETOOL_SYSTEM if protocol == "retool" else _TOOL_CALL_SYSTEM
    return template.format(state=_STATE_NOTE[execution])


def user_prompt(question: str, template: str | None = None) -> str:
    """The user turn: ``template`` with ``{question}`` replaced (no other formatting)."""
    template = template or DEFAULT_USER_TEMPLATE
    if QUESTION_SLOT not in template:
        return f"{template}\n\n{question}"
    return template.replace(QUESTION_SLOT, question)


def malformed_feedback(detail: str, protocol: Protocol) -> str:
    if protocol == "retool":
        return f"Error: {detail}. Write code as <code>, then a ```python block, then </code>."
    return (
        f"Error: {detail}. Call the tool as <tool_call>"
        '{"name": "code_interpreter", "arguments": {"code": "..."}}</tool_call>.'
    )
