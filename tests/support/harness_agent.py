"""A scripted agent for the harness tests: valid tool calls for whatever harness is asking.

A random tiny model makes every harness stop at once, so the harness tests put
:class:`~support.gateway_helpers.ScriptPolicy` with :func:`agent_script` behind the
gateway. It reads the decoded prompt the way a model does: the tools the template lists
(``<tools>`` in the Qwen3 system turn) say which harness is asking and how its shell tool
takes a command; the assistant turns already in the context say how far the episode is.
Then it plays the plan of the task in ``support/harness_tasks/fix_calc``:

1. list the files; 2. fix the bug with ``sed`` (Qwen Code first reads the file with its
own tool: it refuses to edit a file it has not read); 3. run the visible tests; 4. finish
(a final answer, or mini-swe-agent's submit command).

Where a harness offers a sub-agent tool (Claude Code's ``Task``/``Agent``, opencode's and
Qwen Code's ``task``), the first step delegates the listing to a sub-agent instead; in
the sub-agent's own context (which lacks that tool) the script lists the files and
reports back. That turn is a new segment of the episode, linked to its parent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from support.gateway_helpers import hermes_call

PLAN = ("ls", "sed -i 's/a - b/a + b/' calc.py", "python3 test_calc.py")
APP = "/app"
"""The task's work dir inside the harness jail."""
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
FINAL = "The bug in calc.py is fixed and the tests pass."

SHELL_TOOLS = ("bash", "Bash", "shell", "exec_command", "run_shell_command", "local_shell")
"""Names harnesses give their shell tool, in order of preference."""
AGENT_TOOLS = ("Task", "Agent", "task")
"""Names harnesses give the tool that starts a sub-agent."""


@dataclass(frozen=True)
class ToolView:
    """A tool as the template lists it in the prompt."""

    name: str
    parameters: dict[str, Any]
    description: str = ""

    def argument(self, value: str) -> dict[str, Any]:
        """Arguments for a shell tool running ``value``."""
        properties = self.parameters.get("properties") or {}
        key = next((k for k in ("command", "cmd") if k in properties), "command")
        kind = (properties.get(key) or {}).get("type")
        arguments: dict[str, Any] = {key: ["bash", "-lc", value] if kind == "array" else value}
        for extra, spec in properties.items():
            if extra in (self.parameters.get("required") or []) and extra not in arguments:
                arguments[extra] = _filler(extra, spec)
        return arguments


def _filler(name: str, spec: dict[str, Any]) -> Any:
    """A value for a required argument the script has no opinion on."""
    if spec.get("type") == "boolean":
        return False
    if spec.get("type") in ("integer", "number"):
        return 60000 if "timeout" in name else 1
    return "Run the command" if "description" in name else "."


def listed_tools(prompt: str) -> dict[str, ToolView]:
    """The tools the (last) system turn lists, by name."""
    block = prompt.rsplit("<tools>", 1)
    if len(block) < 2:
        return {}
    tools = {}
    for line in block[1].split("</tools>", 1)[0].splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            spec = json.loads(line)
        except json.JSONDecodeError:
            continue
        function = spec.get("function", spec)
        name, description = function["name"], str(function.get("description") or "")
        tools[name] = ToolView(name, function.get("parameters") or {}, description)
    return tools


def steps_taken(prompt: str) -> int:
    """Assistant turns already in the context (the generation prompt is not one)."""
    return max(prompt.count("<|im_start|>assistant") - 1, 0)


def agent_script(prompt: str) -> str:
    """The next answer for the harness asking (see the module docstring)."""
    tools = listed_tools(prompt)
    shell = next((tools[n] for n in SHELL_TOOLS if n in tools), None)
    step = steps_taken(prompt)
    if shell is None:  # a harness call without tools (a title, a summary): plain text
        return "Fixing the calc bug."
    if _is_sub_agent(prompt):
        if step == 0:
            return hermes_call(shell.name, shell.argument("ls"), "Listing the files.")
        return "The directory holds calc.py and test_calc.py."
    agent = next((tools[n] for n in AGENT_TOOLS if n in tools), None)
    if agent is not None and step == 0:
        return hermes_call(agent.name, _delegate(agent), "I will ask a sub-agent to look around.")
    plan = [(shell, shell.argument(command)) for command in PLAN]
    reader = tools.get("read_file")
    if reader is not None:  # Qwen Code edits only files read with its own tool first
        plan.insert(1, (reader, {"file_path": f"{APP}/calc.py"}))
    if agent is not None:
        plan = plan[1:]  # the sub-agent listed the files
    index = step - (1 if agent is not None else 0)
    if index < len(plan):
        tool, arguments = plan[index]
        return hermes_call(tool.name, arguments, f"Step {index + 1}.")
    if SUBMIT.split()[1] in prompt:  # mini-swe-agent ends with its submit command
        return hermes_call(shell.name, shell.argument(SUBMIT), "Submitting.")
    return FINAL


def _delegate(agent: ToolView) -> dict[str, Any]:
    """Arguments for the sub-agent tool: the task, a short description, the general agent,
    and (Claude Code) in the foreground, so its result is the tool's result."""
    properties = agent.parameters.get("properties") or {}
    # Claude Code's general agent is "general-purpose"; opencode lists "- general:".
    general = "general" if "- general:" in agent.description else "general-purpose"
    values = {
        "prompt": DELEGATED,
        "description": "List files",
        "subagent_type": general,
        "run_in_background": False,
    }
    return {key: value for key, value in values.items() if key in properties}


DELEGATED = "List the files in the working directory."


def _is_sub_agent(prompt: str) -> bool:
    """A sub-agent's context: the delegated task is in its first user turn (the main
    agent has it only inside its own tool call)."""
    first_user = prompt.split("<|im_start|>user\n", 1)[-1].split("<|im_end|>", 1)[0]
    return DELEGATED in first_user
