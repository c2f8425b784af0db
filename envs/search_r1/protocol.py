"""The two action protocols, as pure text functions (parsing, formatting, capping).

* ``tags`` (Search-R1): the first ``<search>`` or ``<answer>`` block of a turn decides
  the action; search results come back as ``\\n\\n<information>...</information>\\n\\n``
  inside the same assistant turn, passages formatted ``Doc i(Title: <first line>)
  <rest>`` one per line (Search-R1's ``_passages2string``).
* ``tool_call`` (verl): the model calls a ``search`` tool with ``query_list`` through
  ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks (Hermes/Qwen style);
  each call is answered by a ``tool`` message holding ``{"result": ...}`` with verl's
  passage layout (``Doc i (Title: t)\\ntext``, queries separated by ``\\n---\\n``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agentenvs.envs.search_r1.corpus import split_title
from agentenvs.envs.search_r1.prompts import NO_RESULTS
from agentenvs.envs.search_r1.retrievers.base import Passage
from agentenvs.envs.tool_calls import hermes, search_r1
from agentenvs.envs.tool_calls.types import CallFormat, ParseStatus, ToolCallAttempt

Protocol = Literal["tags", "tool_call"]
TokenCounter = Callable[[str], int]

_SURROGATE = re.compile("[\ud800-\udfff]")
_BLOCK = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_OPEN_TAIL = re.compile(r"<(search|answer)>((?:(?!</?(?:search|answer)>).)*)$", re.DOTALL)
_FIRST_ACTION = re.compile(r"<tool_call>|<answer>")
_THINK = r"(?:<think>(?:(?!</?think>).)*</think>\s*)?"
_TAGS_TURN = re.compile(
    rf"\s*{_THINK}(?:<search>(?:(?!</?search>).)*</search>|<answer>(?:(?!</?answer>).)*</answer>)\s*",
    re.DOTALL,
)
_TOOL_TURN = re.compile(
    rf"\s*{_THINK}(?:(?:<tool_call>(?:(?!</?tool_call>).)*</tool_call>\s*)+"
    r"|<answer>(?:(?!</?answer>).)*</answer>\s*)",
    re.DOTALL,
)


# ---- tags protocol -------------------------------------------------------------------


@dataclass(frozen=True)
class TagAction:
    kind: Literal["search", "answer", "invalid"]
    content: str = ""


def parse_tags(text: str, *, stopped_on_sequence: bool = False) -> TagAction:
    """The deciding action of one turn.

    A sampler that honours the ``</search>`` stop sequence but leaves it out of its
    output (``stopped_on_sequence`` with an unclosed last block) still searched.
    """
    searches = [a for a in search_r1.parse(text) if a.status in _COMPLETE]
    answer = _ANSWER.search(text)
    if answer and (not searches or answer.start() < searches[0].span[0]):
        return TagAction("answer", clean_query(answer.group(1).strip()))
    if searches:
        return TagAction("search", clean_query((searches[0].arguments or {})["query"]))
    if stopped_on_sequence:
        tail = _OPEN_TAIL.search(text)
        if tail:
            return TagAction(tail.group(1), clean_query(tail.group(2).strip()))  # type: ignore[arg-type]
    return TagAction("invalid")


_COMPLETE = (ParseStatus.OK, ParseStatus.INVALID_ARGUMENT)
"""A ``<search>`` block with both tags (an empty one still searches, as in Search-R1)."""


def cut_at_first_stop(text: str) -> str:
    """Search-R1's parse point: up to the first ``</search>``, else the first ``</answer>``.

    ``</search>`` wins even when an ``</answer>`` comes earlier, as in Search-R1's
    ``_postprocess_responses``; a text with neither is kept whole.
    """
    for tag in ("</search>", "</answer>"):
        end = text.find(tag)
        if end >= 0:
            return text[: end + len(tag)]
    return text


def clean_query(query: str) -> str:
    """``query`` with lone surrogates replaced by U+FFFD.

    A JSON tool call may carry an unpaired ``\\ud83d`` escape; such a string cannot be
    encoded as UTF-8, so it would fail in the HTTP client or a C tokenizer instead of
    being searched.
    """
    if not _SURROGATE.search(query):
        return query
    return _SURROGATE.sub("\ufffd", query)


def format_passages(passages: list[Passage]) -> str:
    """Search-R1's layout: ``Doc i(Title: <first line>) <rest>``, one passage per line."""
    lines = []
    for i, passage in enumerate(passages, start=1):
        title, text = split_title(passage.contents)
        lines.append(f"Doc {i}(Title: {title}) {text}\n")
    return "".join(lines)


def information_wrapper(suffix: str = "") -> Callable[[str], str]:
    """Places a body in Search-R1's block: ``\\n\\n<information>body</information>\\n\\n``.

    ``suffix`` follows the block (the last-turn hint) and is never cut.
    """
    return lambda body: f"\n\n<information>{body.strip()}</information>\n\n{suffix}"


def tags_turn_well_formed(text: str) -> bool:
    """An optional ``<think>`` block, then exactly one search or answer block."""
    return _TAGS_TURN.fullmatch(text) is not None


# ---- tool-call protocol --------------------------------------------------------------


@dataclass
class ToolCall:
    queries: list[str] = field(default_factory=list)
    error: str | None = None
    status: ParseStatus = ParseStatus.OK
    span: tuple[int, int] = (0, 0)

    def attempt(self) -> ToolCallAttempt:
        """This call as a recorded attempt (``envs/tool_calls``)."""
        if self.error is not None:
            return ToolCallAttempt(CallFormat.HERMES, self.status, self.span, detail=self.error)
        arguments = {"query_list": self.queries}
        return ToolCallAttempt(CallFormat.HERMES, self.status, self.span, "search", arguments)


@dataclass
class ToolTurn:
    kind: Literal["search", "answer", "invalid"]
    calls: list[ToolCall] = field(default_factory=list)
    answer: str = ""
    unclosed: list[ToolCallAttempt] = field(default_factory=list)
    """Calls the text ended inside (never run; recorded as ``truncated``)."""


def _failed(status: ParseStatus, error: str) -> ToolCall:
    return ToolCall(error=error, status=status)


def _parse_call(raw: str) -> ToolCall:
    call, error = hermes.loads(raw.strip())
    if error:
        return _failed(ParseStatus.MALFORMED_JSON, f"the tool call is {error}")
    if not isinstance(call, dict):
        return _failed(ParseStatus.MALFORMED_JSON, "the tool call must be a JSON object")
    if call.get("name") != "search":
        detail = f"unknown tool {call.get('name')!r}; the only tool is 'search'"
        return _failed(ParseStatus.UNKNOWN_TOOL, detail)
    args = call.get("arguments", call.get("parameters", {}))
    if isinstance(args, str):
        args, error = hermes.loads(args)
        if error:
            return _failed(ParseStatus.MALFORMED_JSON, "the arguments are not valid JSON")
    if not isinstance(args, dict):
        return _failed(ParseStatus.MALFORMED_JSON, "the arguments must be a JSON object")
    queries = args.get("query_list", args.get("query"))
    if isinstance(queries, str):
        queries = [queries]
    if not isinstance(queries, list):
        status = (
            ParseStatus.INVALID_ARGUMENT if queries is not None else ParseStatus.MISSING_ARGUMENT
        )
        return _failed(status, "'query_list' must be a list of strings")
    cleaned = [clean_query(q.strip()) for q in queries if isinstance(q, str) and q.strip()]
    if not cleaned:
        return _failed(ParseStatus.INVALID_ARGUMENT, "'query_list' holds no non-empty query")
    return ToolCall(queries=cleaned)


def parse_tool_turn(text: str) -> ToolTurn:
    """Whichever comes first decides: ``<tool_call>`` blocks (all of them) or ``<answer>``."""
    blocks = hermes.find_blocks(text, cut_json_runs_on=False)
    unclosed = [hermes.attempt_of(b) for b in blocks if not b.closed]
    first = _FIRST_ACTION.search(text)
    if first is None:
        return ToolTurn("invalid", unclosed=unclosed)
    if first.group(0) == "<answer>":
        match = _BLOCK.search(text, first.start())
        if match and match.group(1) == "answer":
            return ToolTurn("answer", answer=match.group(2).strip(), unclosed=unclosed)
        return ToolTurn("invalid", unclosed=unclosed)
    calls = []
    for block in blocks:
        if block.closed:
            call = _parse_call(block.body)
            call.span = (block.start, block.end)
            calls.append(call)
    kind: Literal["search", "invalid"] = "search" if calls else "invalid"
    return ToolTurn(kind, calls=calls, unclosed=unclosed)


def format_passages_verl(passages: list[Passage]) -> str:
    """verl's search tool layout: ``Doc i (Title: t)\\ntext``, blank line between."""
    parts = []
    for i, passage in enumerate(passages, start=1):
        title, text = split_title(passage.contents)
        parts.append(f"Doc {i} (Title: {title})\n{text}\n\n")
    return "".join(parts).strip()


def tool_result_body(results: list[list[Passage]], no_results: str = NO_RESULTS) -> str:
    blocks = [format_passages_verl(hits) if hits else no_results for hits in results]
    return "\n---\n".join(blocks)


def tool_result_json(body: str, note: str | None = None) -> str:
    """verl's ``{"result": ...}``; ``note`` (queries left unsearched) rides along."""
    payload = {"result": body} if note is None else {"result": body, "note": note}
    return json.dumps(payload, ensure_ascii=False)


def tool_error_json(error: str) -> str:
    return json.dumps({"error": error}, ensure_ascii=False)


def tool_turn_well_formed(text: str) -> bool:
    return _TOOL_TURN.fullmatch(text) is not None


# ---- observation length cap ------------------------------------------------------------


def approximate_counter(chars_per_token: float) -> TokenCounter:
    """A tokenizer-free estimate, for text-only use (the gymnasium wrapper)."""
    return lambda text: math.ceil(len(text) / chars_per_token)


def tokenizer_counter(tokenizer: Any) -> TokenCounter:
    """Counts exactly what a renderer appends: ``encode(text, add_special_tokens=False)``."""
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


def cut_to_budget(text: str, budget: int | None, count: TokenCounter) -> tuple[str, bool]:
    """The longest prefix of ``text`` within ``budget`` tokens, tags and all.

    Search-R1's cut (``_process_next_obs`` keeps the first ``max_obs_length`` token
    ids of the whole block, so ``</information>`` is lost); here the cut falls on a
    character boundary, so the text is that of the longest prefix that fits.
    """
    if budget is None or count(text) <= budget:
        return text, False
    lo, hi = 0, len(text)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid
    return text[:lo], True


def fit_to_budget(
    body: str, wrap: Callable[[str], str], budget: int | None, count: TokenCounter
) -> tuple[str, bool]:
    """``wrap(body[:n])`` for the largest ``n`` whose token count is within ``budget``.

    Returns the text and whether it was cut. Only the body is cut: the wrapper's tags
    always stay whole, so the model always sees a closed ``</information>``.
    """
    full = wrap(body)
    if budget is None or count(full) <= budget:
        return full, False
    lo, hi = 0, len(body)  # wrap(body[:lo]) fits (or lo == 0), wrap(body[:hi]) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(wrap(body[:mid])) <= budget:
            lo = mid
        else:
            hi = mid
    return wrap(body[:lo]), True
