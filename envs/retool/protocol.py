"""The two wire protocols a ReTool model speaks, as parsing and formatting only.

1. ``retool``: ReTool's text protocol, inside one assistant turn. The model writes

       <code>
       ```python
       print(2**10)
       ```
       </code>

   and the sampler stops on ``</code>``. The environment appends the result as
   ``\\n<interpreter>\\n{output}\\n</interpreter>\\n\\n`` (the layout of ReTool's
   cold-start data) and generation continues in the same turn. The final answer
   is ``<answer>\\boxed{...}</answer>``.
2. ``tool_call``: verl's ReTool recipe. The model ends its turn after a Hermes
   tool call ``<tool_call>{"name": "code_interpreter", "arguments": {"code":
   "..."}}</tool_call>``; the output comes back as a ``tool`` message rendered by
   the tokenizer's chat template.

Everything here is pure string work, so it is tested without a sandbox.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

Protocol = Literal["retool", "tool_call"]

TOOL_NAME = "code_interpreter"
CODE_OPEN, CODE_CLOSE = "<code>", "</code>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"

_FENCE = re.compile(r"```[ \t]*(?:python3|python|py)?[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)


@dataclass
class ParsedAction:
    """What one action asks for.

    ``kind`` is ``code`` (run ``codes``), ``final`` (the turn ended without a tool
    call: grade it), or ``malformed`` (``problem`` is ``parse_error`` or
    ``empty_code``; ``detail`` says what was wrong, for the model and the logs).
    """

    kind: Literal["code", "final", "malformed"]
    codes: list[str] = field(default_factory=list)
    problem: str = ""
    detail: str = ""
    errors: list[str | None] = field(default_factory=list)
    """``call_rules=verl``: per call, why it cannot run (None: it runs ``codes[i]``)."""


def extract_fenced(block: str) -> str:
    """The code in a fenced block, or the block itself when there is no fence.

    An unterminated fence is tolerated: the model was cut at ``</code>``.
    """
    match = _FENCE.search(block)
    return (match.group(1) if match else block).strip("\n").rstrip()


def parse_retool(text: str) -> ParsedAction:
    close = text.find(CODE_CLOSE)
    if close < 0:
        if CODE_OPEN in text:
            return ParsedAction(
                "malformed", problem="parse_error", detail=f"{CODE_OPEN} was never closed"
            )
        return ParsedAction("final")
    open_ = text.rfind(CODE_OPEN, 0, close)
    if open_ < 0:
        return ParsedAction(
            "malformed", problem="parse_error", detail=f"{CODE_CLOSE} without {CODE_OPEN}"
        )
    code = extract_fenced(text[open_ + len(CODE_OPEN) : close])
    if not code.strip():
        return ParsedAction("malformed", problem="empty_code", detail="the code block is empty")
    return ParsedAction("code", codes=[code])


def parse_tool_calls(text: str) -> ParsedAction:
    """Hermes tool calls; any call that cannot be used makes the action malformed."""
    blocks: list[str] = []
    position = 0
    while True:
        start = text.find(CALL_OPEN, position)
        if start < 0:
            break
        body = start + len(CALL_OPEN)
        end = _json_end(text, body)  # code may itself contain "</tool_call>"
        if end is None:
            end = text.find(CALL_CLOSE, body)
        if end < 0:
            return ParsedAction(
                "malformed", problem="parse_error", detail=f"{CALL_OPEN} was never closed"
            )
        blocks.append(text[body:end])
        position = end + len(CALL_CLOSE)
    if not blocks:
        return ParsedAction("final")
    codes = []
    for block in blocks:
        code, problem = _code_from_call(block)
        if code is None:
            kind = "empty_code" if problem == "the code is empty" else "parse_error"
            return ParsedAction("malformed", problem=kind, detail=problem)
        codes.append(code)
    return ParsedAction("code", codes=codes)


_DECODER = json.JSONDecoder()


def _json_end(text: str, start: int) -> int | None:
    """Index of the ``</tool_call>`` that follows a JSON value starting at ``start``
    (after whitespace), or None when the text there is not JSON closed by the tag."""
    index = start
    while index < len(text) and text[index].isspace():
        index += 1
    try:
        _, stop = _DECODER.raw_decode(text, index)
    except json.JSONDecodeError:
        return None
    while stop < len(text) and text[stop].isspace():
        stop += 1
    return stop if text.startswith(CALL_CLOSE, stop) else None


def _code_from_call(block: str) -> tuple[str | None, str]:
    try:
        call = json.loads(block)
    except json.JSONDecodeError as err:
        return None, f"the tool call is not valid JSON ({err.msg})"
    if not isinstance(call, dict):
        return None, "the tool call must be a JSON object"
    if call.get("name") != TOOL_NAME:
        return None, f"unknown tool {call.get('name')!r}; the only tool is {TOOL_NAME}"
    arguments: Any = call.get("arguments", {})
    if isinstance(arguments, str):  # some models double-encode the arguments
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None, "the arguments are not a JSON object"
    if not isinstance(arguments, dict) or not isinstance(arguments.get("code"), str):
        return None, 'the arguments need a string field "code"'
    code = extract_fenced(arguments["code"]) if "```" in arguments["code"] else arguments["code"]
    if not code.strip():
        return None, "the code is empty"
    return code, ""


_HERMES_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_VERL_FENCE = re.compile(r"```python(.*?)```", re.DOTALL)


def parse_tool_calls_verl(text: str) -> ParsedAction:
    """verl's reading of Hermes tool calls (``HermesToolParser.extract_tool_calls``, then
    ``ToolAgentLoop._call_tool`` and ``CustomSandboxFusionTool.execute``).

    A block whose JSON cannot be read or lacks ``name``/``arguments`` is skipped; no
    call left makes the turn final. A call to another tool, or without string ``code``,
    is kept with an error (answered with the tool_error text). The code is the stripped
    body of its first ```python fence, else the string as it is; empty code runs."""
    if CALL_OPEN not in text or CALL_CLOSE not in text:
        return ParsedAction("final")
    codes: list[str] = []
    errors: list[str | None] = []
    for block in _HERMES_CALL.findall(text):
        try:
            call = json.loads(block)
            name, arguments = call["name"], call["arguments"]
        except (json.JSONDecodeError, KeyError, TypeError, IndexError):
            continue
        error = None
        if name != TOOL_NAME:
            error = f"unknown tool {name!r}; the only tool is {TOOL_NAME}"
        elif not isinstance(arguments, dict) or not isinstance(arguments.get("code"), str):
            error = 'the arguments need a string field "code"'
        code = ""
        if error is None:
            code = arguments["code"]
            fenced = _VERL_FENCE.findall(code)
            code = fenced[0].strip() if fenced else code
        codes.append(code)
        errors.append(error)
    if not codes:
        return ParsedAction("final")
    return ParsedAction("code", codes=codes, errors=errors)


_CODE_SPANS = {
    "retool": re.compile(r"<code>.*?(?:</code>|\Z)", re.DOTALL),
    "tool_call": re.compile(r"<tool_call>.*?(?:</tool_call>|\Z)", re.DOTALL),
}


def prose_text(text: str, protocol: Protocol) -> str:
    """``text`` without its code blocks: where a ``\\boxed{}`` counts as an answer.

    A box inside code (``print(f"\\boxed{{{x}}}")``) is the program's, not the model's
    answer, so it never makes an episode ``answered``.
    """
    return _CODE_SPANS[protocol].sub(" ", text)


def print_last_line(code: str) -> str:
    """verl's ReTool tool: the last non-empty line wrapped in ``print()`` unless it
    starts with ``print`` (``CustomSandboxFusionTool.execute``; a line of spaces is
    not empty there, and indentation is not looked at, so neither is it here)."""
    lines = code.split("\n")
    for index in range(len(lines) - 1, -1, -1):
        if lines[index] == "":
            continue
        if not lines[index].startswith("print"):
            lines[index] = f"print({lines[index]})"
        break
    return "\n".join(lines)


def parse_action(text: str, protocol: Protocol) -> ParsedAction:
    return parse_retool(text) if protocol == "retool" else parse_tool_calls(text)


def interpreter_block(output: str) -> str:
    """ReTool's layout around an interpreter result appended after ``</code>``."""
    return f"\n<interpreter>\n{output}\n</interpreter>\n\n"


def tool_message(output: str) -> dict[str, str]:
    return {"role": "tool", "content": output}


def code_action(code: str, lead: str = "", protocol: Protocol = "retool") -> str:
    """An action that runs ``code``, the way a well-behaved model writes it."""
    if protocol == "retool":
        return f"{lead}{CODE_OPEN}\n```python\n{code}\n```\n{CODE_CLOSE}"
    call = json.dumps({"name": TOOL_NAME, "arguments": {"code": code}})
    return f"{lead}{CALL_OPEN}\n{call}\n{CALL_CLOSE}"


def tool_spec(description: str, code_description: str = "Python source to run.") -> dict[str, Any]:
    """The JSON-schema tool handed to the chat template (OpenAI function format)."""
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "description": code_description}},
                "required": ["code"],
            },
        },
    }
