"""A generated corpus of tool-call texts with ground-truth labels, for every format.

Each :class:`Case` is a model output and the statuses its attempts must get, in
order, written down from the formats' rules (``envs/tool_calls/*.py`` module docs),
not read off the parsers: valid calls with hard payloads (Unicode, lone surrogates,
closing tags inside values, 200 kB of code), every cut of a valid call (truncated),
broken JSON and quoting, unknown tools, missing and mistyped arguments, nested and
stray tags, tags inside prose and code, too many calls. ``cases()`` is deterministic.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.tool_calls import CallFormat, ToolSchema, deepseek, glm45, hermes, qwen3_coder

TOOLS = {
    "run": ToolSchema("run", ("code",), {"code": "string", "timeout": "integer"}),
    "lookup": ToolSchema("lookup", ("query",), {"query": "string", "k": "integer"}),
}

OK, TRUNC, JSON_ = "ok", "truncated", "malformed_json"
MARKUP, UNKNOWN, MISSING = "malformed_markup", "unknown_tool", "missing_argument"
INVALID, TOO_MANY = "invalid_argument", "too_many_calls"


@dataclass(frozen=True)
class Case:
    label: str
    format: CallFormat
    text: str
    expected: tuple[str, ...]
    max_calls: int | None = None
    stopped: bool = False
    arguments: dict[str, Any] | None = field(default=None, compare=False)
    """For a single ``ok`` call: the arguments it must be read with."""


HUGE = "x = 1\n" * 35_000  # 210 kB of code
PAYLOADS: dict[str, str] = {
    "ascii": "print(2 ** 10)",
    "unicode": "print('héllo wörld — 日本語 • ﷺ')",
    "emoji": "s = '👩‍👩‍👧‍👦🚀'\nprint(len(s))",
    "rtl_zero_width": "print('שלום\u200bعالم\u200d')",
    "close_tags": 'print("</tool_call> </function> <|im_end|>")',
    "open_tags": 'print("<tool_call> <function=x> <arg_key>")',
    "quotes_backslashes": 'print("a\\"b", \'c\\\\d\', r"\\n")',
    "multiline": "def f(x):\n    return x * 2\n\n\nprint(f(21))\n",
    "huge": HUGE,
    "json_looking": '{"name": "run", "arguments": {}}',
}

_WRITERS: dict[CallFormat, Callable[[str, dict[str, Any]], str]] = {
    CallFormat.HERMES: hermes.format_call,
    CallFormat.QWEN3_CODER: qwen3_coder.format_call,
    CallFormat.GLM45: glm45.format_call,
    CallFormat.DEEPSEEK: deepseek.format_call,
}
_OPENERS = {
    CallFormat.HERMES: "<tool_call>",
    CallFormat.QWEN3_CODER: "<tool_call>",
    CallFormat.GLM45: "<tool_call>",
    CallFormat.DEEPSEEK: deepseek.CALLS_BEGIN + deepseek.CALL_BEGIN,
}


def _cuts(text: str, start: int, count: int = 12) -> list[int]:
    """``count`` cut points spread from just after the opening marker to one short."""
    span = len(text) - 1 - start
    if span <= 0:
        return []
    step = max(1, span // count)
    points = [*list(range(start, len(text) - 1, step))[:count], len(text) - 1]
    return sorted(set(points))


def chat_format_cases(fmt: CallFormat) -> Iterator[Case]:
    write = _WRITERS[fmt]
    opener = len(_OPENERS[fmt])
    for name, code in PAYLOADS.items():
        args = {"code": code, "timeout": 5}
        call = write("run", args)
        # GLM strips its values; the other formats keep them as written.
        read = {"code": code.strip(), "timeout": 5} if fmt == CallFormat.GLM45 else args
        yield Case(f"{fmt}/valid/{name}", fmt, f"Let me run it.\n{call}", (OK,), arguments=read)
        if name == "huge":
            continue
        # DeepSeek: once the call's own end marker is written the call is whole (the
        # outer calls-end marker is optional).
        whole = call.find(deepseek.CALL_END) + len(deepseek.CALL_END)
        for cut in _cuts(call, opener):
            done = fmt == CallFormat.DEEPSEEK and cut >= whole
            yield Case(f"{fmt}/truncated/{name}@{cut}", fmt, call[:cut], (OK if done else TRUNC,))
    ok = write("run", {"code": "print(1)"})
    yield Case(f"{fmt}/two_calls", fmt, ok + "\n" + ok, (OK, OK))
    yield Case(f"{fmt}/too_many", fmt, ok + ok + ok, (OK, TOO_MANY, TOO_MANY), max_calls=1)
    yield Case(f"{fmt}/unknown_tool", fmt, write("rm_rf", {"code": "x"}), (UNKNOWN,))
    yield Case(f"{fmt}/missing_argument", fmt, write("run", {"timeout": 3}), (MISSING,))
    yield Case(f"{fmt}/no_arguments", fmt, write("lookup", {}), (MISSING,))
    yield Case(f"{fmt}/prose_only", fmt, "I will not call a tool. 2 + 2 = 4.", ())
    yield Case(f"{fmt}/empty", fmt, "", ())
    yield Case(f"{fmt}/unicode_name_args", fmt, write("lookup", {"query": "名前 🚀"}), (OK,))
    yield Case(f"{fmt}/then_prose", fmt, ok + "\nThe result will follow.", (OK,))


def hermes_cases() -> Iterator[Case]:
    fmt = CallFormat.HERMES

    def wrap(body: str) -> str:
        return f"<tool_call>\n{body}\n</tool_call>"

    broken = {
        "single_quotes": "{'name': 'run', 'arguments': {'code': 'x'}}",
        "trailing_comma": '{"name": "run", "arguments": {"code": "x"},}',
        "unquoted_keys": '{name: "run", arguments: {code: "x"}}',
        "python_literals": '{"name": "run", "arguments": {"code": "x", "timeout": None}}',
        "comment": '{"name": "run", // the tool\n "arguments": {"code": "x"}}',
        "missing_brace": '{"name": "run", "arguments": {"code": "x"}',
        "extra_text_after": '{"name": "run", "arguments": {"code": "x"}} and more',
        "array_body": '[{"name": "run", "arguments": {"code": "x"}}]',
        "string_body": '"run"',
        "empty_body": "",
        "no_name": '{"arguments": {"code": "x"}}',
        "name_not_string": '{"name": 7, "arguments": {"code": "x"}}',
        "arguments_list": '{"name": "run", "arguments": ["x"]}',
        "double_encoded_broken": '{"name": "run", "arguments": "{code: x}"}',
        "smart_quotes": "{\u201cname\u201d: \u201crun\u201d, \u201carguments\u201d: {}}",
        "deep_nesting": '{"name": "run", "arguments": ' + "[" * 100_000 + "]" * 100_000 + "}",
    }
    for name, body in broken.items():
        yield Case(f"hermes/malformed/{name}", fmt, wrap(body), (JSON_,))
    fine = {
        "no_whitespace": '<tool_call>{"name":"run","arguments":{"code":"x"}}</tool_call>',
        "double_encoded": wrap(json.dumps({"name": "run", "arguments": '{"code": "x"}'})),
        "parameters_alias": wrap('{"name": "run", "parameters": {"code": "x"}}'),
        "lone_surrogate": wrap('{"name": "lookup", "arguments": {"query": "\\ud83d"}}'),
        "nested_json_value": wrap(
            '{"name": "run", "arguments": {"code": "x", "meta": {"a": [1]}}}'
        ),
        "keys_reordered": wrap('{"arguments": {"code": "x"}, "name": "run"}'),
        "in_markdown_fence": "```\n"
        + wrap('{"name": "run", "arguments": {"code": "x"}}')
        + "\n```",
    }
    for name, text in fine.items():
        yield Case(f"hermes/valid/{name}", fmt, text, (OK,))
    good = wrap('{"name": "run", "arguments": {"code": "x"}}')
    yield Case(
        "hermes/wrong_type", fmt, wrap('{"name": "run", "arguments": {"code": 12}}'), (INVALID,)
    )
    yield Case(
        "hermes/bool_for_int",
        fmt,
        wrap('{"name": "run", "arguments": {"code": "x", "timeout": true}}'),
        (INVALID,),
    )
    # A block without JSON ends at the next closing tag; the second one is stray.
    yield Case("hermes/nested_open", fmt, "<tool_call>" + good + "</tool_call>", (JSON_, MARKUP))
    yield Case("hermes/stray_close", fmt, 'done {"x": 1}</tool_call>', (MARKUP,))
    yield Case(
        "hermes/prose_mentions_close", fmt, "close with `</tool_call>` then " + good, (MARKUP, OK)
    )
    yield Case("hermes/stopped_unclosed", fmt, good[: -len("</tool_call>")], (OK,), stopped=True)
    yield Case("hermes/unclosed_not_stopped", fmt, good[: -len("</tool_call>")], (TRUNC,))
    yield Case("hermes/qwen3_body", fmt, qwen3_coder.format_call("run", {"code": "x"}), (JSON_,))


def xml_cases() -> Iterator[Case]:
    q, g = CallFormat.QWEN3_CODER, CallFormat.GLM45
    yield Case("qwen3/hermes_body", q, hermes.format_call("run", {"code": "x"}), (MARKUP,))
    yield Case(
        "qwen3/bad_name", q, "<tool_call>\n<function=run it>\n</function>\n</tool_call>", (MARKUP,)
    )
    yield Case(
        "qwen3/junk_in_function",
        q,
        "<tool_call>\n<function=run>\nhello\n</function>\n</tool_call>",
        (MARKUP,),
    )
    yield Case(
        "qwen3/text_after_function",
        q,
        "<tool_call>\n<function=run>\n<parameter=code>\nx\n</parameter>\n</function>\noops\n</tool_call>",
        (MARKUP,),
    )
    yield Case(
        "qwen3/duplicate_parameter",
        q,
        "<tool_call>\n<function=run>\n<parameter=code>\na\n</parameter>\n<parameter=code>\nb\n"
        "</parameter>\n</function>\n</tool_call>",
        (INVALID,),
    )
    yield Case(
        "qwen3/int_not_json",
        q,
        qwen3_coder.format_call("run", {"code": "x", "timeout": "five"}),
        (INVALID,),
    )
    yield Case("qwen3/function_outside", q, "<function=run>\n</function>", (MARKUP,))
    yield Case("qwen3/stray_close", q, "nothing here </tool_call>", (MARKUP,))
    # A call that does not start with <function= is skipped to its closing tag.
    nested = "<tool_call>" + qwen3_coder.format_call("run", {"code": "x"})
    yield Case("qwen3/nested_open", q, nested, (MARKUP,))
    # A value runs to the first terminator of its own kind: it cannot hold one.
    holds = qwen3_coder.format_call("run", {"code": "print('</parameter>')"})
    yield Case("qwen3/value_holds_terminator", q, holds, (MARKUP,))
    holds = glm45.format_call("run", {"code": "print('</arg_value>')"})
    yield Case("glm/value_holds_terminator", g, holds, (MARKUP,))
    yield Case("glm/hermes_body", g, hermes.format_call("run", {"code": "x"}), (MARKUP,))
    yield Case("glm/name_with_space", g, "<tool_call>run it\n</tool_call>", (MARKUP,))
    yield Case(
        "glm/key_without_value",
        g,
        "<tool_call>run\n<arg_key>code</arg_key>\n</tool_call>",
        (MARKUP,),
    )
    yield Case("glm/junk", g, "<tool_call>run\nplease run\n</tool_call>", (MARKUP,))
    yield Case(
        "glm/int_not_json", g, glm45.format_call("run", {"code": "x", "timeout": "'5'"}), (INVALID,)
    )
    yield Case("glm/key_outside", g, "<arg_key>code</arg_key>", (MARKUP,))
    yield Case("glm/stray_close", g, "x </tool_call>", (MARKUP,))
    yield Case(
        "glm/stopped_unclosed",
        g,
        glm45.format_call("run", {"code": "x"})[: -len("</tool_call>")],
        (OK,),
        stopped=True,
    )


def deepseek_cases() -> Iterator[Case]:
    fmt = CallFormat.DEEPSEEK
    begin, end, sep = deepseek.CALL_BEGIN, deepseek.CALL_END, deepseek.SEP

    def call(head: str, body: str) -> str:
        return f"{deepseek.CALLS_BEGIN}{begin}{head}\n{body}{end}{deepseek.CALLS_END}"

    fenced = '```json\n{"code": "x"}\n```'
    yield Case("deepseek/bare_json", fmt, call(f"function{sep}run", '{"code": "x"}'), (OK,))
    yield Case("deepseek/no_sep", fmt, call("function run", fenced), (MARKUP,))
    yield Case("deepseek/wrong_type", fmt, call(f"tool{sep}run", fenced), (MARKUP,))
    yield Case(
        "deepseek/bad_json", fmt, call(f"function{sep}run", "```json\n{code: x}\n```"), (JSON_,)
    )
    yield Case(
        "deepseek/unclosed_fence",
        fmt,
        call(f"function{sep}run", '```json\n{"code": "x"}'),
        (MARKUP,),
    )
    yield Case("deepseek/array_args", fmt, call(f"function{sep}run", "```json\n[1]\n```"), (JSON_,))
    yield Case("deepseek/stray_end", fmt, "done" + end, (MARKUP,))
    nested = f"{begin}function{sep}run\n{begin}function{sep}run\n{fenced}{end}"
    yield Case("deepseek/nested_begin", fmt, nested, (MARKUP, OK))
    yield Case("deepseek/no_outer_markers", fmt, f"{begin}function{sep}run\n{fenced}{end}", (OK,))


def tag_cases() -> Iterator[Case]:
    s, a, r = CallFormat.SEARCH_R1, CallFormat.ALFWORLD_ACTION, CallFormat.RETOOL_CODE
    queries = ["who wrote hamlet", "東京 の 人口", "emoji 🚀 query", "a" * 50_000, "<b>bold</b>"]
    for i, query in enumerate(queries):
        text = f"<think>need facts</think><search>{query}</search>"
        yield Case(f"search/valid/{i}", s, text, (OK,), arguments={"query": query})
        block = f"<search>{query}</search>"
        for cut in _cuts(block, len("<search>"), 6):
            yield Case(f"search/truncated/{i}@{cut}", s, block[:cut], (TRUNC,))
    yield Case("search/empty", s, "<search>   </search>", (INVALID,))
    yield Case("search/stray", s, "use `</search>` to close", (MARKUP,))
    yield Case("search/two", s, "<search>a</search><search>b</search>", (OK, TOO_MANY), max_calls=1)
    yield Case("search/answer_only", s, "<answer>Paris</answer>", ())
    yield Case("search/stopped", s, "<search>capital of france", (OK,), stopped=True)
    # A regular expression reads the shortest pair: the inner opening tag is content.
    yield Case("search/nested", s, "<search>a <search>b</search></search>", (OK, MARKUP))
    commands = ["go to fridge 1", "take apple 1 from countertop 2", "Open Drawer 3."]
    for i, command in enumerate(commands):
        block = f"<action>{command}</action>"
        yield Case(f"alfworld/valid/{i}", a, f"I think so.\n{block}", (OK,))
        for cut in _cuts(block, len("<action>"), 6):
            yield Case(f"alfworld/truncated/{i}@{cut}", a, block[:cut], (TRUNC,))
    yield Case("alfworld/case", a, "<ACTION>look</Action>", (OK,))
    yield Case("alfworld/empty", a, "<action></action>", (INVALID,))
    yield Case("alfworld/stray", a, "look</action>", (MARKUP,))
    yield Case("alfworld/none", a, "I will look around.", ())
    for name, code in PAYLOADS.items():
        if "<code>" in code or "</code>" in code:
            continue
        block = f"<code>\n```python\n{code}\n```\n</code>"
        want = code.strip("\n").rstrip()
        yield Case(f"retool/valid/{name}", r, f"Compute.\n{block}", (OK,), arguments={"code": want})
        if name == "huge":
            continue
        for cut in _cuts(block, len("<code>"), 6):
            yield Case(f"retool/truncated/{name}@{cut}", r, block[:cut], (TRUNC,))
    yield Case("retool/no_fence", r, "<code>print(1)</code>", (OK,), arguments={"code": "print(1)"})
    yield Case("retool/empty", r, "<code>\n```python\n```\n</code>", (INVALID,))
    yield Case("retool/stray", r, "```python\nprint(1)\n```\n</code>", (MARKUP,))
    yield Case(
        "retool/reopened",
        r,
        "<code>a\n<code>print(2)</code>",
        (OK,),
        arguments={"code": "print(2)"},
    )
    yield Case("retool/stopped", r, "<code>\n```python\nprint(3)\n```\n", (OK,), stopped=True)


def cases() -> list[Case]:
    """The whole corpus, in a fixed order."""
    found: list[Case] = []
    for fmt in _WRITERS:
        found += chat_format_cases(fmt)
    found += hermes_cases()
    found += xml_cases()
    found += deepseek_cases()
    found += tag_cases()
    return found
