"""What the model reads back from the interpreter: formatting and truncation.

Truncation policies (``truncation``):

* ``head_tail``: ReTool's: a long output keeps its first 200 and last 200
  characters around ``...``.
* ``middle``: verl's tool agent loop: above 256 characters, keep the first and
  last half of the budget around ``...(truncated)...``.
* ``tokens``: keep at most ``max_output_tokens`` tokens of the policy's own
  tokenizer (half from the start, half from the end); without a tokenizer (the
  gymnasium wrapper) four characters count as one token.
* ``none``: the sandbox's own output cap is the only bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from agentenvs.sandbox.base import ExecResult, ExecStatus

Truncation = Literal["head_tail", "middle", "tokens", "none"]
ErrorDetail = Literal["last_line", "traceback"]
ToolOutput = Literal["agentenvs", "verl"]
"""agentenvs: stdout, then the error (its last line or traceback), a hint when silent,
our timeout/limit texts; verl: ``stdout + stderr`` as they are (``""`` when silent),
and one fixed text on a timeout (``verl/tools/sandbox_fusion_tools.py``, ``execute_code``)."""

MIDDLE_MARKER = "...(truncated)..."
HEAD_TAIL_MARKER = "..."
CHARS_PER_TOKEN_FALLBACK = 4


class TokenCounter(Protocol):
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...


@dataclass(frozen=True)
class OutputPolicy:
    truncation: Truncation = "head_tail"
    head_tail_chars: int = 200
    middle_max_chars: int = 256
    max_output_tokens: int = 256
    error_detail: ErrorDetail = "last_line"
    empty_output: str = "(no output; print() the values you want to see)"
    style: ToolOutput = "agentenvs"
    timeout_output: str = "(no output: the program was stopped at its time limit)"


def render_result(result: ExecResult, policy: OutputPolicy, timeout: float) -> str:
    """The text of one execution, before truncation."""
    if policy.style == "verl":
        # SandboxFusion reports a timed-out run as not finished: verl sends its fixed
        # text; any run that finished (whatever its exit code) is stdout + stderr.
        if result.status == ExecStatus.TIMEOUT:
            return policy.timeout_output
        return result.stdout + result.stderr
    stdout = result.stdout.rstrip("\n")
    if result.status == ExecStatus.OK:
        text = stdout
        if result.stdout_truncated:
            text += "\n[output cut by the sandbox's size limit]"
        return text if text.strip() else policy.empty_output
    if result.status == ExecStatus.TIMEOUT:
        problem = f"TimeoutError: the code did not finish within {timeout:g} seconds"
    elif result.status == ExecStatus.MEMORY:
        problem = "MemoryError: the code exceeded the memory limit"
    elif result.status == ExecStatus.OUTPUT_LIMIT:
        problem = "OutputLimitError: the code printed more than the sandbox allows"
    else:
        problem = _error_text(result, policy.error_detail)
    return f"{stdout}\n{problem}" if stdout.strip() else problem


def _error_text(result: ExecResult, detail: ErrorDetail) -> str:
    stderr = result.stderr.strip("\n")
    if not stderr:
        code = result.return_code
        return result.message or (f"the program exited with status {code}" if code else "error")
    if detail == "traceback":
        return stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    return lines[-1].strip() if lines else stderr


def truncate(
    text: str, policy: OutputPolicy, tokenizer: TokenCounter | None = None
) -> tuple[str, bool]:
    """``text`` cut by the policy, and whether anything was cut."""
    if policy.truncation == "head_tail":
        keep = policy.head_tail_chars
        if len(text) <= 2 * keep:
            return text, False
        return text[:keep] + HEAD_TAIL_MARKER + text[-keep:], True
    if policy.truncation == "middle":
        budget = policy.middle_max_chars
        if len(text) <= budget:
            return text, False
        half = budget // 2
        return text[:half] + MIDDLE_MARKER + text[len(text) - half :], True
    if policy.truncation == "tokens":
        return _truncate_tokens(text, policy.max_output_tokens, tokenizer)
    return text, False


def _truncate_tokens(text: str, budget: int, tokenizer: TokenCounter | None) -> tuple[str, bool]:
    half = max(1, budget // 2)
    if tokenizer is None:
        chars = budget * CHARS_PER_TOKEN_FALLBACK
        if len(text) <= chars:
            return text, False
        keep = half * CHARS_PER_TOKEN_FALLBACK
        return text[:keep] + MIDDLE_MARKER + text[len(text) - keep :], True
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) <= budget:
        return text, False
    head = tokenizer.decode(ids[:half], skip_special_tokens=False)
    tail = tokenizer.decode(ids[len(ids) - half :], skip_special_tokens=False)
    return head + MIDDLE_MARKER + tail, True
