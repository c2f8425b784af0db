"""Does a tokenizer's chat template extend a conversation turn by turn?

The collector appends each observation's tokens to the sampled ones and never
re-renders earlier turns. That is only equivalent to what the template would
render for the whole conversation when each rendering extends the previous one.
Templates that rewrite history (dropping earlier ``<think>`` blocks, say) break
that; the collector then starts a new training sample at the break. This module
plays typical conversations through the chat renderer and reports, per turn,
whether it extended, where it diverged, and what the collector will do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentenvs.envs.renderers import ChatRenderer, Tokenizer
from agentenvs.envs.text import Message

_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {
            "type": "object",
            "properties": {"word": {"type": "string"}},
            "required": ["word"],
        },
    },
}

CONVERSATIONS: dict[str, tuple[list[Message], list[dict] | None]] = {
    "multi_turn": (
        [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "Another one?"},
            {"role": "assistant", "content": "Green."},
            {"role": "user", "content": "And a third?"},
            {"role": "assistant", "content": "Red."},
        ],
        None,
    ),
    "tool_call": (
        [
            {"role": "user", "content": "What does 'ample' mean?"},
            {
                "role": "assistant",
                "content": '<tool_call>{"name": "lookup", "arguments": {"word": "ample"}}'
                "</tool_call>",
            },
            {"role": "tool", "content": "ample: enough or more than enough"},
            {"role": "assistant", "content": "It means plentiful."},
        ],
        [_TOOL],
    ),
    "thinking": (
        [
            {"role": "user", "content": "What is 2 + 3?"},
            {"role": "assistant", "content": "<think>2 plus 3 is 5.</think>5"},
            {"role": "user", "content": "Times 4?"},
            {"role": "assistant", "content": "<think>5 times 4 is 20.</think>20"},
            {"role": "user", "content": "Minus 1?"},
            {"role": "assistant", "content": "<think>20 minus 1 is 19.</think>19"},
        ],
        None,
    ),
}


@dataclass
class TurnCheck:
    turn: int
    extends: bool
    divergence: int | None = None
    """Character offset where the full re-rendering first differs, if it does."""
    detail: str = ""

    @property
    def collector_action(self) -> str:
        return "merge (one sample)" if self.extends else "split (new sample)"


@dataclass
class ConversationCheck:
    name: str
    turns: list[TurnCheck] = field(default_factory=list)
    token_exact: bool = True
    """The appended context decodes to the template's rendering of the prompt before the
    last turn (the last turn is the model's own tokens)."""

    @property
    def extends(self) -> bool:
        return all(t.extends for t in self.turns)


@dataclass
class TemplateReport:
    tokenizer: str
    conversations: list[ConversationCheck]

    @property
    def extends(self) -> bool:
        return all(c.extends for c in self.conversations)


def _first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def check_conversation(
    tokenizer: Tokenizer, name: str, messages: list[Message], tools: list[dict] | None
) -> ConversationCheck:
    """Play ``messages`` through the chat renderer as the collector would."""
    renderer = ChatRenderer(tokenizer)
    first_assistant = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    history = [dict(m) for m in messages[:first_assistant]]
    context = renderer.initial_tokens(history, tools)
    result = ConversationCheck(name)
    end_of_turn = renderer.end_of_turn[0] if renderer.end_of_turn else ""
    i = first_assistant
    turn = 0
    while i < len(messages):
        content = messages[i]["content"]
        action = renderer.encode(content + end_of_turn)
        context = context + action
        j = i + 1
        while j < len(messages) and messages[j]["role"] != "assistant":
            j += 1
        observation = [dict(m) for m in messages[i + 1 : j]]
        turn += 1
        if not observation:
            break
        before = renderer.render_text([*history, messages[i]], tools, add_generation_prompt=False)
        after = renderer.render_text(
            [*history, messages[i], *observation], tools, add_generation_prompt=True
        )
        appended = renderer.append(history, tools, content, end_of_turn, observation)
        if appended.restart:
            offset = _first_difference(before, after)
            result.turns.append(
                TurnCheck(
                    turn,
                    False,
                    offset,
                    f"rendering after turn {turn} rewrites earlier text at char {offset}: "
                    f"{before[offset : offset + 40]!r} became {after[offset : offset + 40]!r}",
                )
            )
            context = list(appended.tokens)
        else:
            result.turns.append(TurnCheck(turn, True))
            context = context + appended.tokens
        i = j
    # The context before the last action must decode to the template's rendering of
    # the prompt the model saw for it. The last turn itself is the model's, not the
    # template's: rendered as a final message it may be framed differently (Qwen3
    # wraps it in an empty think block), which says nothing about the context.
    if i < len(messages):  # ended on an assistant turn
        prompt = renderer.render_text(messages[:i], tools, add_generation_prompt=True)
        result.token_exact = renderer.decode(context[: len(context) - len(action)]) == prompt
    else:  # ended on an observation: the whole context is the next prompt
        prompt = renderer.render_text(messages, tools, add_generation_prompt=True)
        result.token_exact = renderer.decode(context) == prompt
    return result


def check_template(tokenizer: Tokenizer, name: str | None = None) -> TemplateReport:
    checks = [
        check_conversation(tokenizer, conv_name, messages, tools)
        for conv_name, (messages, tools) in CONVERSATIONS.items()
    ]
    label = name or getattr(tokenizer, "name_or_path", "") or "tokenizer"
    return TemplateReport(label, checks)
