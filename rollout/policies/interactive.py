"""The interactive policy: a person plays the environment from the terminal.

Each turn shows what is new in the observation since this person's last action
(the decoded delta, special tokens included, so the chat structure is visible)
and reads one line. The line is encoded with the tokenizer; a line that already
ends on one of the turn's stop strings ends there (``stop``), otherwise the
end-of-turn token is added (``eos``), as a model would emit. Type ``\\n`` for a
line break inside the action.

Input and output streams can be injected, which is how it is tested; one prompt
is open at a time even when several episodes run concurrently.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

from agentenvs.envs.types import StopCondition, TokensWithLogprobs
from agentenvs.rollout.policies.base import PolicyError


class InteractivePolicy:
    def __init__(
        self,
        tokenizer: Any = None,
        *,
        input: Any = None,  # a text stream to read lines from; None reads stdin
        output: Any = None,  # a text stream to write to; None writes stdout
        end_of_turn: str | None = None,
    ) -> None:
        from rich.console import Console

        if isinstance(tokenizer, str) or tokenizer is None:
            from agentenvs.rollout.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(tokenizer)
        self.tokenizer = tokenizer
        self.input = input
        self.console = Console(file=output, highlight=False, soft_wrap=True)
        self.end_of_turn = end_of_turn if end_of_turn is not None else tokenizer.eos_token
        self._seen: list[int] = []
        self._lock = threading.Lock()

    async def __call__(
        self, observation: list[int], stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        return await asyncio.to_thread(self._turn, list(observation), list(stop), max_tokens)

    def _turn(
        self, observation: list[int], stop: list, max_tokens: int | None
    ) -> TokensWithLogprobs:
        from rich.rule import Rule

        with self._lock:
            seen = self._seen
            fresh = observation[len(seen) :] if observation[: len(seen)] == seen else observation
            self.console.print(Rule(style="dim"))
            self.console.print(
                self.tokenizer.decode(fresh, skip_special_tokens=False), markup=False
            )
            line = self._read_line()
            text = line.replace("\\n", "\n")
            tokens = list(self.tokenizer.encode(text, add_special_tokens=False))
            strings = [s for s in stop if isinstance(s, str) and s]
            if any(text.endswith(s) for s in strings):
                reason = "stop"
            else:
                if self.end_of_turn:
                    tokens += self.tokenizer.encode(self.end_of_turn, add_special_tokens=False)
                reason = "eos"
            if max_tokens is not None and len(tokens) > max_tokens:
                tokens, reason = tokens[:max_tokens], "length"
                self.console.print(f"(cut to {max_tokens} tokens)", markup=False)
            self._seen = observation + tokens
            return TokensWithLogprobs(tokens, None, reason)

    def _read_line(self) -> str:
        """One line without its newline; end of input is an error, not an empty action."""
        try:
            raw = self.console.input("[bold]your action>[/bold] ", stream=self.input)
        except EOFError:
            raw = ""
        else:
            if self.input is None:
                if not sys.stdin.isatty():
                    self.console.print(raw, markup=False)
                return raw  # input() strips the newline and raises EOFError at the end
        if not raw:
            raise PolicyError("interactive input ended (no more lines to read)")
        line = raw[:-1] if raw.endswith("\n") else raw
        self.console.print(line, markup=False)  # echo: piped input is not shown otherwise
        return line

    def provenance(self) -> dict[str, Any]:
        return {"policy": "interactive"}
