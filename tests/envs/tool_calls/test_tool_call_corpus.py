"""The malformed-call corpus (tests/support/tool_call_corpus.py): 0 crashes, every case
classified as its label says, every format and status present."""

from __future__ import annotations

from collections import Counter

from support.tool_call_corpus import TOOLS, cases

from agentenvs.envs.tool_calls import CallFormat, ParseStatus, parse

CHAT = {CallFormat.HERMES, CallFormat.QWEN3_CODER, CallFormat.GLM45, CallFormat.DEEPSEEK}


def test_every_case_is_classified_as_labelled() -> None:
    corpus = cases()
    assert len(corpus) >= 500
    assert len({c.label for c in corpus}) == len(corpus)
    wrong, crashed = [], []
    for case in corpus:
        tools = TOOLS if case.format in CHAT else None
        try:
            got = parse(
                case.text,
                case.format,
                tools=tools,
                max_calls=case.max_calls,
                stopped_on_sequence=case.stopped,
            )
        except Exception as err:  # a crash is what this test exists to catch
            crashed.append(f"{case.label}: {type(err).__name__}: {err}")
            continue
        statuses = tuple(str(a.status) for a in got)
        if statuses != case.expected:
            wrong.append(f"{case.label}: got {statuses}, labelled {case.expected}")
        elif case.arguments is not None and got[0].arguments != case.arguments:
            wrong.append(f"{case.label}: arguments {str(got[0].arguments)[:80]}")
        for attempt in got:
            start, end = attempt.span
            assert 0 <= start < end <= len(case.text), case.label
    assert not crashed, crashed[:5]
    assert not wrong, f"{len(wrong)} misclassified: {wrong[:5]}"


def test_the_corpus_covers_every_format_and_status() -> None:
    corpus = cases()
    formats = Counter(c.format for c in corpus)
    assert set(formats) == set(CallFormat)
    assert min(formats.values()) >= 25
    labelled = {status for c in corpus for status in c.expected}
    assert labelled == {str(s) for s in ParseStatus}
    chat_statuses = {s for c in corpus if c.format in CHAT for s in c.expected}
    assert chat_statuses == {str(s) for s in ParseStatus}
