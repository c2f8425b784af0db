"""The usage examples in the contract's docstrings (``Env``, ``TextEnv``) run as written.

Each example is the literal block after ``::`` in the docstring, run as the body of
an async function (both use top-level ``await``, as a reader's notebook would).
"""

from __future__ import annotations

import textwrap
from typing import Any

import agentenvs.envs.text as text_module
import agentenvs.envs.types as types_module
from agentenvs.envs.text import TextEnv
from agentenvs.envs.types import Env, TokensWithLogprobs


def example_of(cls: type) -> str:
    """The indented block after the docstring's ``::``."""
    doc = textwrap.dedent("\n".join((cls.__doc__ or "").splitlines()[1:]))
    _, _, after = doc.partition("::\n")
    assert after, f"{cls.__name__}'s docstring has no example"
    lines = []
    for line in after.splitlines():
        if line and not line.startswith(" "):
            break
        lines.append(line)
    return textwrap.dedent("\n".join(lines))


async def run_example(cls: type, namespace: dict[str, Any]) -> dict[str, Any]:
    body = textwrap.indent(example_of(cls), "    ")
    source = f"async def _example():\n{body}\n    return locals()\n"
    exec(compile(source, f"<{cls.__name__} docstring>", "exec"), namespace)
    return await namespace["_example"]()


async def test_the_env_example_counts_down_with_a_policy() -> None:
    answers = iter([[2], [1]])

    async def policy(observation: list[int], stop: list[int]) -> TokensWithLogprobs:
        return TokensWithLogprobs(next(answers), stop_reason="stop")

    done = await run_example(Env, {**vars(types_module), "policy": policy})
    assert done["result"].episode_done and done["result"].reward == 1.0
    assert done["env"].context == [3, 2, 1]


async def test_the_text_env_example_plays_its_episode() -> None:
    done = await run_example(TextEnv, dict(vars(text_module)))
    assert done["prompt"] == [{"role": "user", "content": "Say hi."}]
    assert (done["result"].reward, done["result"].done) == (1.0, True)
