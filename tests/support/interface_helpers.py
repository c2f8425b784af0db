"""Small TextEnvs for testing the shared machinery (renderers, limits, the CLI).

They are real TextEnvs, just with task logic a test can steer: the observation
for each turn is given up front, and every call the machinery makes is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentenvs.envs.text import Message, TextEnv, TextStep
from agentenvs.envs.types import SamplerStopReason
from agentenvs.rollout.tokenizer import CHATML_TEMPLATE

# ChatML that drops the <think> block of every assistant turn but the last, the way
# several reasoning-model templates do. It cannot extend a conversation.
THINK_STRIPPING_TEMPLATE = CHATML_TEMPLATE.replace(
    "{%- if not (loop.first and message.role == 'system') -%}"
    "{{ '<|im_start|>' + message.role + nl + message.content + '<|im_end|>' + nl }}",
    "{%- if not (loop.first and message.role == 'system') -%}"
    "{%- set content = message.content -%}"
    "{%- if message.role == 'assistant' and not loop.last and '</think>' in content -%}"
    "{%- set content = content.split('</think>')[-1].lstrip() -%}"
    "{%- endif -%}"
    "{{ '<|im_start|>' + message.role + nl + content + '<|im_end|>' + nl }}",
)


@dataclass
class ScriptedTask(TextEnv):
    """Answers turn ``i`` with ``observations[i]``; ends after the last one, or when an
    action contains ``finish``. Records what it saw."""

    observations: list[str | Message | list[Message] | None]
    prompt: str = "Say something."
    system: str | None = None
    stops: list[str] = field(default_factory=list)
    finish: str = "FINAL"
    seen: list[tuple[str, str]] = field(default_factory=list)
    closed: int = 0

    def initial_messages(self) -> list[Message]:
        messages: list[Message] = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": self.prompt})
        return messages

    def stop_sequences(self) -> list[str]:
        return list(self.stops)

    async def step(self, action_text: str, *, stop_reason: SamplerStopReason) -> TextStep:
        self.seen.append((action_text, stop_reason))
        turn = len(self.seen) - 1
        if self.finish in action_text:
            return TextStep(reward=1.0, done=True)
        if turn >= len(self.observations):
            return TextStep(reward=0.0, done=True, stop_reason="parse_error")
        return TextStep(self.observations[turn], reward=0.25, metrics={"turn_metric": turn})

    async def close(self) -> None:
        self.closed += 1


def char_tokens(tokenizer, text: str) -> list[int]:
    """``text`` tokenized one character at a time: a valid tokenization that differs
    from what ``encode(text)`` gives, so a re-tokenized action would be noticed."""
    return [t for ch in text for t in tokenizer.encode(ch, add_special_tokens=False)]


def im_end(tokenizer) -> int:
    return tokenizer.convert_tokens_to_ids("<|im_end|>")


def stop_keys(metrics: dict) -> list[str]:
    return [k for k, v in metrics.items() if k.startswith("stop/") and v]
