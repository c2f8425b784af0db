"""One charts episode: a chart in the prompt, zoom calls answered with pictures, an answer.

The model calls ``zoom`` in Hermes JSON (``<tool_call>{"name": "zoom", "arguments":
{"bar": "C"}}</tool_call>``, the Qwen templates' format) and gets a ``tool`` message
with the enlarged crop; it answers with ``<answer>N</answer>``. Malformed output is
answered with a hint, never raised: a call that does not parse, an unknown bar, a
turn with neither call nor answer. Every attempt is recorded in the step's logs
(:mod:`agentenvs.envs.tool_calls.record`) so ``agentenvs check`` can audit them.
"""

from __future__ import annotations

import re
from typing import Any

from agentenvs.envs.charts.charts import Chart, draw_chart, zoom
from agentenvs.envs.charts.reward import answer_reward
from agentenvs.envs.forking import copy_task_state
from agentenvs.envs.text import Message, TextEnv, TextStep
from agentenvs.envs.tool_calls import ParseStatus, ToolOutcome, step_logs
from agentenvs.envs.tool_calls.hermes import CLOSE, FORMAT, format_call, parse
from agentenvs.envs.tool_calls.schema import tools_of
from agentenvs.envs.types import SamplerStopReason, StopReason
from agentenvs.envs.vision.parts import image_part, text_part, tool_message

_ANSWER = re.compile(r"<answer>\s*(-?\d+)\s*</answer>")
NO_ANSWER = "no_answer"

ZOOM_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "zoom",
        "description": "Show the top of one bar enlarged, where its value can be read.",
        "parameters": {
            "type": "object",
            "properties": {"bar": {"type": "string", "description": "The bar's letter."}},
            "required": ["bar"],
        },
    },
}
_TOOLS = tools_of([ZOOM_TOOL])

PROMPT = (
    "Answer the question about this bar chart. The values are printed above the bars, "
    "too small to read here: call the zoom tool on a bar to see its value. "
    "Give the final answer as <answer>N</answer>."
)


class ChartsEnv(TextEnv):
    def __init__(self, chart: Chart, max_zooms: int) -> None:
        self.chart = chart
        self.max_zooms = max_zooms
        self.zooms = 0
        self.zoomed: list[str] = []

    def initial_messages(self) -> list[Message]:
        return [
            {"role": "system", "content": PROMPT},
            {
                "role": "user",
                "content": [image_part(draw_chart(self.chart)), text_part(self.chart.question())],
            },
        ]

    def tools(self) -> list[dict[str, Any]]:
        return [ZOOM_TOOL]

    def stop_sequences(self) -> list[str]:
        return ["</answer>", CLOSE]

    async def step(self, action_text: str, *, stop_reason: SamplerStopReason) -> TextStep:
        attempts = parse(action_text, tools=_TOOLS, max_calls=1, stopped_on_sequence=False)
        calls = [a for a in attempts if a.status == ParseStatus.OK]
        answer = _ANSWER.search(action_text)
        if answer is not None and not calls:
            value = int(answer.group(1))
            reward = answer_reward(value, self.chart.answer())
            return TextStep(
                reward=reward,
                done=True,
                stop_reason=StopReason.COMPLETED,
                metrics={"correct": reward, "zooms": self.zooms},
                logs=step_logs(attempts, [FORMAT], "<tool_response>"),
            )
        if not calls:
            hint = "Call zoom on a bar, or answer as <answer>N</answer>."
            if attempts:
                hint = f"That tool call could not be read ({attempts[0].detail}). {hint}"
            return TextStep(
                {"role": "user", "content": hint},
                metrics={"invalid_actions": 1},
                logs=step_logs(attempts, [FORMAT], "<tool_response>"),
            )
        call = calls[0]
        bar = str((call.arguments or {}).get("bar", "")).strip().upper()
        if self.zooms >= self.max_zooms:
            outcome, observation = ToolOutcome.ERROR, "No zooms left: answer now."
        elif bar not in self.chart.labels:
            known = ", ".join(self.chart.labels)
            outcome, observation = ToolOutcome.ERROR, f"There is no bar {bar!r}; bars: {known}."
        else:
            self.zooms += 1
            self.zoomed.append(bar)
            outcome = ToolOutcome.OK
            observation = tool_message(f"Bar {bar}, enlarged:", [zoom(self.chart, bar)])
        done = [a.with_outcome(outcome) if a is call else a for a in attempts]
        if isinstance(observation, str):
            observation = {"role": "tool", "content": observation}
        return TextStep(
            observation,
            metrics={"zoom_calls": 1},
            logs=step_logs(done, [FORMAT], "<tool_response>"),
        )

    def on_limit(self, reason: str) -> TextStep | None:
        return TextStep(metrics={"correct": 0.0, "zooms": self.zooms})

    def scripted_action(self, variant: str = "oracle") -> str | None:
        if variant == "oracle":
            missing = [b for b in self.chart.needed() if b not in self.zoomed]
            if missing:
                return format_call("zoom", {"bar": missing[0]})
            return f"<answer>{self.chart.answer()}</answer>"
        if variant == "wrong":
            return f"<answer>{self.chart.answer() + 1}</answer>"
        if variant == "malformed":
            return '<tool_call>{"name": "zoom", "arguments": {"bar": </tool_call>'
        return None

    async def fork(self) -> ChartsEnv:
        return copy_task_state(self, shared=(self.chart,))
