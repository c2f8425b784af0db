"""Prompt texts written for agentenvs (users pass their own with ``prompt_template``).

A template is any text with a ``{question}`` field (other braces are kept as written).
"""

from __future__ import annotations

import copy
from typing import Any

from agentenvs.envs.strings import StringTable

TAGS_PROMPT = (
    "Answer the question below. You have a search engine over an encyclopedia.\n"
    "- Reason inside <think> and </think> whenever you need to.\n"
    "- To look something up, write <search> your query </search>. The best matching "
    "passages come back between <information> and </information>. You may search "
    "more than once.\n"
    "- When you are sure, write only the short answer between <answer> and </answer>, "
    "for example <answer> Ada Lovelace </answer>.\n\n"
    "Question: {question}\n"
)

TOOL_PROMPT = (
    "Answer the question below. You can call the `search` tool with a list of queries; "
    "it returns the best matching encyclopedia passages for each. Reason inside <think> "
    "and </think> when it helps. When you are sure, reply with only the short answer "
    "between <answer> and </answer>, for example <answer> Ada Lovelace </answer>.\n\n"
    "Question: {question}"
)

INVALID_ACTION_HINT = (
    "\nThat was not a valid action. To search, put a query between <search> and "
    "</search>; to finish, put the answer between <answer> and </answer>.\n"
)
INVALID_TOOL_HINT = (
    "Your message neither called the search tool nor gave an answer. Call `search` with "
    "a query_list, or write the answer between <answer> and </answer>."
)
LAST_TURN_HINT = "No searches remain: write the final answer between <answer> and </answer>.\n\n"
LAST_TURN_TOOL_HINT = (
    "No searches remain: reply with the final answer between <answer> and </answer>."
)
NO_RESULTS = "No passages matched the query."
QUERY_REJECTED = (
    "\nThe search engine could not run that query. Write a shorter, plainer query between "
    "<search> and </search>, or answer between <answer> and </answer>.\n"
)
QUERY_REJECTED_TOOL = (
    "The search engine could not run those queries. Call `search` with shorter, plainer "
    "queries, or write the answer between <answer> and </answer>."
)


def dropped_queries_note(dropped: int, limit: int) -> str:
    """Said in the tool result when queries past the per-turn limit were not searched."""
    return f"{dropped} more quer{'y' if dropped == 1 else 'ies'} not searched: at most {limit} per turn"


SEARCH_TOOL: dict[str, Any] = {
    # verl's search tool schema: one argument, a list of queries.
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search an encyclopedia. Returns the best matching passages for each query.",
        "parameters": {
            "type": "object",
            "properties": {
                "query_list": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "One or more complete search queries.",
                }
            },
            "required": ["query_list"],
        },
    },
}


STRINGS = StringTable(
    defaults={
        "invalid_action": INVALID_ACTION_HINT,
        "invalid_tool": INVALID_TOOL_HINT,
        "last_turn": LAST_TURN_HINT,
        "last_turn_tool": LAST_TURN_TOOL_HINT,
        "no_results": NO_RESULTS,
        "query_rejected": QUERY_REJECTED,
        "query_rejected_tool": QUERY_REJECTED_TOOL,
        "tool_description": SEARCH_TOOL["function"]["description"],
        "tool_query_description": SEARCH_TOOL["function"]["parameters"]["properties"]["query_list"][
            "description"
        ],
    },
    field_names=frozenset({"system_prompt", "prompt_template"}),
)
"""Every text the model can read, by the name a strings file gives it (docs/search_r1.md)."""


def search_tool(description: str, query_description: str) -> dict[str, Any]:
    """The search tool's schema with the given descriptions."""
    tool = copy.deepcopy(SEARCH_TOOL)
    tool["function"]["description"] = description
    tool["function"]["parameters"]["properties"]["query_list"]["description"] = query_description
    return tool


def render_prompt(template: str, question: str) -> str:
    """Fill ``{question}``; other braces in a user's template are left alone."""
    if "{question}" not in template:
        raise ValueError("prompt_template must contain a {question} field")
    return template.replace("{question}", question)
