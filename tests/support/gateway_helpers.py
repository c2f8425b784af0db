"""What the gateway and harness tests share: a scripted policy on a real vocabulary, tools,
and a running gateway.

No model can be downloaded here, and a random tiny model makes an agent harness stop at
once, so the harness tests drive the gateway with :class:`ScriptPolicy`: a *policy* (tokens
in, tokens out) that reads the decoded prompt, picks its answer from a script, and returns
it as Qwen3-vocabulary token ids ending with ``<|im_end|>``, the way a sampler returns
them. Its first characters are sampled one token each, as a model may sample a word a
tokenizer would merge: the ids are real and decode to the text, but re-encoding the text
gives other ids, so a capture that re-tokenized a turn is caught by ``check``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.gateway.policy_gateway import GatewayOptions, PolicyGateway
from agentenvs.rollout.gateway.serve import GatewayServer
from support.vocab import shared_vocabulary

SPLIT_CHARS = 3
"""Leading characters of every answer sampled one token each (a non-canonical split)."""

BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command and return its output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def qwen3() -> Any:
    return shared_vocabulary("qwen3")


def sampled_ids(tokenizer: Any, text: str, end: str = "<|im_end|>") -> list[int]:
    """``text`` as a sampler may have produced it, then the end-of-turn token."""
    head, rest = text[:SPLIT_CHARS], text[SPLIT_CHARS:]
    ids = [i for char in head for i in tokenizer.encode(char, add_special_tokens=False)]
    ids += tokenizer.encode(rest, add_special_tokens=False)
    return [*ids, tokenizer.convert_tokens_to_ids(end)]


def hermes_call(name: str, arguments: dict[str, Any], thought: str = "") -> str:
    """An answer with one tool call in the Qwen (Hermes) format the template declares."""
    import json

    payload = json.dumps({"name": name, "arguments": arguments})
    return f"{thought}\n<tool_call>\n{payload}\n</tool_call>".lstrip("\n")


class ScriptPolicy:
    """A shared policy whose answer is ``script(decoded prompt)`` (see the module doc).

    ``prompts`` keeps every observation it was called with, in order."""

    def __init__(self, tokenizer: Any, script: Callable[[str], str]) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.prompts: list[list[int]] = []

    async def __call__(
        self, observation: list[int], stop: Any, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        self.prompts.append(list(observation))
        text = self.script(self.tokenizer.decode(observation, skip_special_tokens=False))
        ids = sampled_ids(self.tokenizer, text)
        if max_tokens is not None and len(ids) > max_tokens:
            return TokensWithLogprobs(ids[:max_tokens], [-0.5] * max_tokens, "length")
        # An engine that stopped on the end-of-sequence token says so (``check`` holds it to that).
        ended = bool(ids) and ids[-1] == self.tokenizer.eos_token_id
        return TokensWithLogprobs(ids, [-0.5] * len(ids), "eos" if ended else "stop")

    def provenance(self) -> dict[str, Any]:
        return {"policy": "script", "model": "script"}


def list_then_answer(prompt: str) -> str:
    """Call ``bash ls`` until a tool result is in the context, then answer in text."""
    if "<tool_response>" in prompt:
        return "The directory holds a.py and b.py."
    return hermes_call("bash", {"command": "ls"}, thought="Let me look at the files.")


@contextlib.asynccontextmanager
async def running_gateway(
    policy: Any, *, store: TrajectoryStore | None = None, **options: Any
) -> AsyncIterator[GatewayServer]:
    """A gateway over ``policy`` on the Qwen3 vocabulary, on a free loopback port."""
    gateway = PolicyGateway(policy, GatewayOptions(tokenizer=qwen3(), store=store, **options))
    async with GatewayServer(gateway) as server:
        yield server
