"""Search-R1's tags: ``<search>query</search>`` is a call to the search tool.

``<answer>...</answer>`` ends the episode and is no tool call, so it is not an attempt;
the environment decides which of the two came first. Read by :func:`tags.paired`.
"""

from __future__ import annotations

from agentenvs.envs.tool_calls.tags import paired_parser
from agentenvs.envs.tool_calls.types import CallFormat

FORMAT = CallFormat.SEARCH_R1
TOOL_NAME = "search"
ARGUMENT = "query"

parse = paired_parser("search", FORMAT, name=TOOL_NAME, argument=ARGUMENT)
