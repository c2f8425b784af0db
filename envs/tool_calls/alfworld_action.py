"""ALFWorld's tag protocol: ``<action>go to fridge 1</action>`` is one game command.

Tags are matched whatever their case (``<ACTION>``), as ALFWorld prompts are read by
models that capitalise. Read by :func:`tags.paired`; whether the command is one the
game admits is the environment's to say (an ``error`` outcome, not a parse failure).
"""

from __future__ import annotations

from agentenvs.envs.tool_calls.tags import paired_parser
from agentenvs.envs.tool_calls.types import CallFormat

FORMAT = CallFormat.ALFWORLD_ACTION
TOOL_NAME = "action"
ARGUMENT = "command"

parse = paired_parser("action", FORMAT, name=TOOL_NAME, argument=ARGUMENT, ignore_case=True)
