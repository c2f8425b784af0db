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

from agentenvs.envs.tool_calls import hermes, retool_code
from agentenvs.envs.tool_calls.retool_code import extract_fenced as extract_fenced
from agentenvs.envs.tool_calls.types import CallFormat, ParseStatus, ToolCallAttempt

Protocol = Literal["retool", "tool_call"]

TOOL_NAME = "code_interpreter"
CODE_OPEN, CODE_CLOSE = retool_code.OPEN, retool_code.CLOSE
CALL_OPEN, CALL_CLOSE = hermes.OPEN, hermes.CLOSE

FORMATS: dict[Protocol, CallFormat] = {
    "retool": CallFormat.RETOOL_CODE,
    "tool_call": CallFormat.HERMES,
}
"""The tool-call format each protocol declares to the model."""


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
    attempts: list[ToolCallAttempt] = field(default_factory=list)
    """Every tool-call attempt in the action, classified (``envs/tool_calls``)."""
    call_index: list[int] = field(default_factory=list)
    """Per entry of ``codes``, the index of its attempt in ``attempts``."""


def parse_retool(text: str) -> ParsedAction:
    """The first ``</code>`` decides (the sampler stops there): the code before it, a
    code block never closed, or a closing tag with no block."""
    attempts = retool_code.parse(text, max_calls=1)
    if not attempts:
        return ParsedAction("final")
    first = attempts[0]
    if first.status == ParseStatus.TRUNCATED:
        detail = f"{CODE_OPEN} was never closed"
        return ParsedAction("malformed", problem="parse_error", detail=detail, attempts=attempts)
    if first.status == ParseStatus.MALFORMED_MARKUP:
        detail = f"{CODE_CLOSE} without {CODE_OPEN}"
        return ParsedAction("malformed", problem="parse_error", detail=detail, attempts=attempts)
    if first.status == ParseStatus.INVALID_ARGUMENT:
        return ParsedAction(
            "malformed", problem="empty_code", detail=first.detail, attempts=attempts
        )
    code = (first.arguments or {})["code"]
    return ParsedAction("code", codes=[code], attempts=attempts, call_index=[0])


def parse_tool_calls(text: str) -> ParsedAction:
    """Hermes tool calls; any call that cannot be used makes the action malformed."""
    blocks = hermes.find_blocks(text, cut_json_runs_on=False)
    attempts = [_call_attempt(block) for block in blocks]
    if any(not block.closed for block in blocks):
        detail = f"{CALL_OPEN} was never closed"
        return ParsedAction("malformed", problem="parse_error", detail=detail, attempts=attempts)
    if not blocks:
        return ParsedAction("final")
    for attempt in attempts:
        if not attempt.parsed:
            kind = "empty_code" if attempt.detail == "the code is empty" else "parse_error"
            return ParsedAction("malformed", problem=kind, detail=attempt.detail, attempts=attempts)
    codes = [(a.arguments or {})["code"] for a in attempts]
    return ParsedAction("code", codes=codes, attempts=attempts, call_index=list(range(len(codes))))


def _call_attempt(block: hermes.Block) -> ToolCallAttempt:
    span = (block.start, block.end)
    if not block.closed:
        detail = f"{CALL_OPEN} was never closed"
        return ToolCallAttempt(CallFormat.HERMES, ParseStatus.TRUNCATED, span, detail=detail)
    code, status, problem = _code_from_call(block.body)
    if code is None:
        return ToolCallAttempt(CallFormat.HERMES, status, span, detail=problem)
    arguments = {"code": code}
    return ToolCallAttempt(CallFormat.HERMES, ParseStatus.OK, span, TOOL_NAME, arguments)


def _code_from_call(block: str) -> tuple[str | None, ParseStatus, str]:
    """The code of one call, or its parse status and the reason it cannot run."""
    call, error = hermes.loads(block)
    if error:
        return None, ParseStatus.MALFORMED_JSON, f"the tool call is {error}"
    if not isinstance(call, dict):
        return None, ParseStatus.MALFORMED_JSON, "the tool call must be a JSON object"
    if call.get("name") != TOOL_NAME:
        detail = f"unknown tool {call.get('name')!r}; the only tool is {TOOL_NAME}"
        return None, ParseStatus.UNKNOWN_TOOL, detail
    arguments: Any = call.get("arguments", {})
    if isinstance(arguments, str):  # some models double-encode the arguments
        arguments, error = hermes.loads(arguments)
        if error:
            return None, ParseStatus.MALFORMED_JSON, "the arguments are not a JSON object"
    if not isinstance(arguments, dict) or not isinstance(arguments.get("code"), str):
        missing = isinstance(arguments, dict) and "code" not in arguments
        status = ParseStatus.MISSING_ARGUMENT if missing else ParseStatus.INVALID_ARGUMENT
        return None, status, 'the arguments need a string field "code"'
    code = extract_fenced(arguments["code"]) if "```" in arguments["code"] else arguments["code"]
    if not code.strip():
        return None, ParseStatus.INVALID_ARGUMENT, "the code is empty"
    return code, ParseStatus.OK, ""


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
        return ParsedAction("final", attempts=hermes.parse(text))
    codes: list[str] = []
    errors: list[str | None] = []
    attempts: list[ToolCallAttempt] = []
    for match in _HERMES_CALL.finditer(text):
        span = match.span()
        try:
            call = json.loads(match.group(1))
            name, arguments = call["name"], call["arguments"]
        except (json.JSONDecodeError, KeyError, TypeError, IndexError, RecursionError):
            detail = "skipped: not JSON with a name and arguments"
            attempts.append(
                ToolCallAttempt(_HERMES, ParseStatus.MALFORMED_JSON, span, detail=detail)
            )
            continue
        error, status = None, ParseStatus.OK
        if name != TOOL_NAME:
            error = f"unknown tool {name!r}; the only tool is {TOOL_NAME}"
            status = ParseStatus.UNKNOWN_TOOL
        elif not isinstance(arguments, dict) or not isinstance(arguments.get("code"), str):
            error = 'the arguments need a string field "code"'
            status = ParseStatus.INVALID_ARGUMENT
        code = ""
        if error is None:
            code = arguments["code"]
            fenced = _VERL_FENCE.findall(code)
            code = fenced[0].strip() if fenced else code
        shown = name if isinstance(name, str) else None
        args = {"code": code} if error is None else None
        attempts.append(ToolCallAttempt(_HERMES, status, span, shown, args, error or ""))
        codes.append(code)
        errors.append(error)
    if not codes:
        return ParsedAction("final", attempts=attempts)
    index = [i for i, a in enumerate(attempts) if a.status != ParseStatus.MALFORMED_JSON]
    return ParsedAction("code", codes=codes, errors=errors, attempts=attempts, call_index=index)


_HERMES = CallFormat.HERMES


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
