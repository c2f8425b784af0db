"""An ORS environment written the way an ORS author writes one: the ``openreward`` SDK's
own ``Environment``, ``@tool`` and ``@terminal``, served by its ``Server`` from this module
(``python tests/support/ors_arithmetic_env.py PORT``). Nothing of agentenvs is imported.

``arithmetic``: add two numbers; a ``calculator`` tool (no reward) and ``submit`` (reward 1
for the right sum, 0 otherwise; ends the episode). ``plainanswer``: the same questions
answered in a plain message, graded by its ``@terminal`` tool.
"""

from __future__ import annotations

import ast
import operator
import sys

from openreward.environments import (
    Environment,
    Server,
    Split,
    TextBlock,
    ToolOutput,
    terminal,
    tool,
)
from pydantic import BaseModel

TASKS = {
    "train": [{"a": 17, "b": 25}, {"a": 300, "b": 45}, {"a": 8, "b": 9}],
    "test": [{"a": 1000, "b": 1}],
}
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def evaluate(expression: str) -> int:
    """Integers joined by + - * only (no eval of model text)."""

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError("only integers with + - *")

    return walk(ast.parse(expression, mode="eval").body)


class CalculatorInput(BaseModel):
    expression: str


class SubmitInput(BaseModel):
    answer: int


class PlainInput(BaseModel):
    reply: str


def question(spec) -> str:
    return f"What is {spec['a']} + {spec['b']}?"


class Arithmetic(Environment):
    @classmethod
    def list_splits(cls):
        return [Split(name="train", type="train"), Split(name="test", type="test")]

    @classmethod
    def list_tasks(cls, split: str):
        return TASKS[split]

    def get_prompt(self):
        return [TextBlock(text=question(self.task_spec) + " Submit the sum as an integer.")]

    @tool(concurrent=True)
    async def calculator(self, params: CalculatorInput) -> ToolOutput:
        """Evaluate integer arithmetic (+, -, *)."""
        try:
            return ToolOutput(blocks=[TextBlock(text=str(evaluate(params.expression)))])
        except (ValueError, SyntaxError) as err:
            return ToolOutput(blocks=[TextBlock(text=f"error: {err}")])

    @tool
    async def submit(self, params: SubmitInput) -> ToolOutput:
        """Submit the final answer."""
        right = params.answer == self.task_spec["a"] + self.task_spec["b"]
        text = "correct" if right else "wrong"
        return ToolOutput(blocks=[TextBlock(text=text)], reward=float(right), finished=True)


class PlainAnswer(Environment):
    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str):
        return TASKS["train"]

    def get_prompt(self):
        return [TextBlock(text=question(self.task_spec) + " Reply with the number only.")]

    @tool(concurrent=True)
    async def calculator(self, params: CalculatorInput) -> ToolOutput:
        """Evaluate integer arithmetic (+, -, *)."""
        return ToolOutput(blocks=[TextBlock(text=str(evaluate(params.expression)))])

    @terminal
    @tool
    async def grade(self, params: PlainInput) -> ToolOutput:
        """Grade the final reply."""
        right = params.reply.strip() == str(self.task_spec["a"] + self.task_spec["b"])
        return ToolOutput(blocks=[TextBlock(text="graded")], reward=float(right), finished=True)


if __name__ == "__main__":
    Server([Arithmetic, PlainAnswer]).run(host="127.0.0.1", port=int(sys.argv[1]))
