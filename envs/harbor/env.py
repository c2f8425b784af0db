"""One episode of a Harbor task: shell commands through a ``bash`` tool, then its tests.

The prompt is the task's ``instruction.md`` (paths mapped, see
:mod:`agentenvs.envs.harbor.workspace`) after a system message saying how to call the
tool. Each reply's tool calls are read with the configured parser; each ``bash`` call
runs in the episode's workspace and its exit code and output come back as a ``tool``
message (observation tokens, masked from the loss). A reply with no tool call ends the
episode: the task's ``tests/test.sh`` runs on the files as the commands left them and
its reward (``reward.txt``, or ``reward.json``'s ``reward``) is the episode's. So does
running out of commands (``max_commands``) or of the task's ``agent.timeout_sec``.
"""

from __future__ import annotations

from typing import Any

from agentenvs.envs.harbor.config import HarborConfig
from agentenvs.envs.harbor.task import HarborTask
from agentenvs.envs.harbor.workspace import Verdict, Workspace
from agentenvs.envs.rendered_env import RenderedEnv
from agentenvs.envs.text import Message, TextEnv, TextStep
from agentenvs.envs.tool_calls import ToolCallAttempt, ToolOutcome, parse, step_logs, tools_of
from agentenvs.envs.types import Metrics, SamplerStopReason, StopReason

BASH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command in the task's working directory.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command."}},
            "required": ["command"],
        },
    },
}
DONE = "Done."


def shown_output(code: int | None, stdout: str, stderr: str, limit: int) -> str:
    text = (stdout + (f"\n[stderr]\n{stderr}" if stderr.strip() else "")).strip()
    if len(text) > limit:
        text = text[: limit // 2] + "\n[... output cut ...]\n" + text[-limit // 2 :]
    return f"[exit {code}]\n{text}" if text else f"[exit {code}]"


class HarborTextEnv(TextEnv):
    """One Harbor task episode; :meth:`start` lays out its files in the sandbox."""

    def __init__(self, config: HarborConfig, task: HarborTask) -> None:
        self.config = config
        self.task = task
        self.workspace: Workspace | None = None
        self.commands = 0
        self.seconds = 0.0
        self.turns = 0

    async def start(self) -> None:
        from agentenvs.envs.retool.sandboxes import shared_sandbox

        sandbox = await shared_sandbox(self.config.sandbox)
        self.workspace = Workspace(self.task, sandbox)
        await self.workspace.open()

    def _workspace(self) -> Workspace:
        if self.workspace is None:
            raise RuntimeError("HarborTextEnv.start() must run first")
        return self.workspace

    def initial_messages(self) -> list[Message]:
        messages: list[Message] = []
        if self.config.system_prompt:
            messages.append({"role": "system", "content": self.config.system_prompt})
        messages.append(
            {"role": "user", "content": self._workspace().mapped(self.task.instruction)}
        )
        return messages

    def tools(self) -> list[dict[str, Any]] | None:
        return [BASH_TOOL]

    async def step(self, action_text: str, *, stop_reason: SamplerStopReason) -> TextStep:
        self.turns += 1
        attempts = parse(
            action_text,
            self.config.tool_format,
            tools=tools_of([BASH_TOOL]),
            stopped_on_sequence=stop_reason == "stop",
        )
        if not attempts:
            return await self._score(StopReason.COMPLETED)
        replies: list[Message] = []
        recorded: list[ToolCallAttempt] = []
        metrics: Metrics = {"tool/calls": 0, "tool/ok": 0, "tool/errors": 0,
                            "tool/parse_errors": 0}  # fmt: skip
        for attempt in attempts:
            if not attempt.parsed:
                metrics["tool/parse_errors"] += 1
                text = f"Error: could not read the tool call ({attempt.status}): {attempt.detail}"
                replies.append({"role": "tool", "content": text})
                recorded.append(attempt)
                continue
            if self._out_of_budget():
                recorded.append(attempt.with_outcome(ToolOutcome.NOT_RUN, "out of commands"))
                continue
            reply, outcome = await self._bash(str((attempt.arguments or {}).get("command", "")))
            metrics["tool/calls"] += 1
            metrics["tool/ok" if outcome == ToolOutcome.OK else "tool/errors"] += 1
            replies.append({"role": "tool", "content": reply})
            recorded.append(attempt.with_outcome(outcome))
        logs = step_logs(recorded, [self.config.tool_format])
        if self._out_of_budget():
            scored = await self._score(StopReason.MAX_TOOL_CALLS)
            return TextStep(observation=replies, reward=scored.reward, done=True,
                            stop_reason=scored.stop_reason, metrics={**metrics, **scored.metrics},
                            logs={**logs, **scored.logs})  # fmt: skip
        return TextStep(observation=replies, metrics=metrics, logs=logs)

    def _out_of_budget(self) -> bool:
        budget = self.task.agent_timeout
        return self.commands >= self.config.max_commands or (
            budget is not None and self.seconds >= budget
        )

    async def _bash(self, command: str) -> tuple[str, ToolOutcome]:
        self.commands += 1
        timeout = self.config.command_timeout
        if self.task.agent_timeout is not None:
            timeout = max(1.0, min(timeout, self.task.agent_timeout - self.seconds))
        result = await self._workspace().run(command, timeout=timeout)
        self.seconds += result.duration
        if result.status in ("ok", "error"):
            text = shown_output(result.return_code, result.stdout, result.stderr,
                                self.config.max_output_chars)  # fmt: skip
            return text, ToolOutcome.OK if result.return_code == 0 else ToolOutcome.ERROR
        outcome = ToolOutcome.TIMEOUT if result.status == "timeout" else ToolOutcome.ERROR
        return f"[{result.status}] {result.message}".strip(), outcome

    async def _score(self, reason: StopReason) -> TextStep:
        timeout = min(self.task.verifier_timeout, self.config.sandbox.timeout)
        verdict: Verdict = await self._workspace().verify(timeout=timeout)
        metrics: Metrics = {f"harbor/{k}": v for k, v in verdict.rewards.items()}
        metrics.update({"harbor/commands": self.commands, "harbor/passed": int(verdict.reward > 0)})
        logs = {"harbor_task": self.task.name, "harbor_verifier": verdict.status}
        if verdict.detail:
            logs["harbor_verifier_output"] = verdict.detail[-800:]
        if self.task.ignored:
            logs["harbor_ignored"] = ", ".join(self.task.ignored)
        return TextStep(reward=verdict.reward, done=True, stop_reason=reason, metrics=metrics,
                        logs=logs)  # fmt: skip

    def scripted_action(self, variant: str = "oracle") -> str | None:
        """``oracle``: the task's ``solution/solve.sh`` as one command, then done;
        ``empty``: done at once (no work: the tests must fail it)."""
        if variant == "empty":
            return DONE
        if variant != "oracle":
            return None
        script = self.task.solution.get("solve.sh")
        if self.turns > 0 or script is None:
            return DONE
        import json

        command = self._workspace().mapped(script.decode())
        call = {"name": "bash", "arguments": {"command": command}}
        return f"<tool_call>{json.dumps(call)}</tool_call>"

    async def close(self) -> None:
        self.workspace = None  # the sandbox is shared; the episode's files lived in runs


class HarborRenderedEnv(RenderedEnv):
    """A Harbor episode at the token level, named for its task in records."""

    task: HarborTextEnv

    def label(self) -> str:
        return f"Harbor({self.task.task.name})"
