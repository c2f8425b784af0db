"""Prompt texts written for this project, one per protocol and execution mode.

Users replace the user turn with ``prompt_template`` (``{question}`` marks where
the problem goes; other braces, such as ``\\boxed{}``, are left alone) and the
system turn with ``system_prompt`` (an empty string drops it).
"""

from __future__ import annotations

from agentenvs.envs.retool.protocol import Protocol

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
