"""guess_number played over a text wire and the same guesses in process, for the protocol
servers' tests (OpenEnv, ORS): a server that renders, scores or ends an episode wrongly
answers differently from the task itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentenvs.envs.registry import make

Step = tuple[str, float, bool]
"""One step as a text client sees it: the observation text, the reward, done."""


async def bisect(send: Callable[[str], Awaitable[Step]]) -> list[Step]:
    """Play by binary search on the feedback ``send(action)`` returns, to the end."""
    low, high, steps = 1, 100, []
    while True:
        guess = (low + high) // 2
        step = await send(f"<guess>{guess}</guess>")
        steps.append(step)
        if step[2]:
            return steps
        low, high = (guess + 1, high) if "higher" in step[0] else (low, guess - 1)


async def in_process(task_index: int, guesses: list[int]) -> list[Step]:
    """The same guesses on the task in process."""
    task = make("guess_number").make_text_env(task_index)
    steps = []
    for guess in guesses:
        step = await task.step(f"<guess>{guess}</guess>", stop_reason="stop")
        steps.append((step.observation or "", step.reward, step.done))
    return steps


async def assert_plays_as_in_process(task_index: int, remote: list[Step]) -> None:
    """``remote`` (a bisection that solved task ``task_index``) step for step equals the
    same guesses in process: rewards, ends and feedback texts."""
    assert remote[-1][1:] == (1.0, True)
    guesses = [int(text.split()[0]) for text, _, _ in remote[:-1]]
    secret = make("guess_number").secret(task_index)
    local = await in_process(task_index, [*guesses, secret])
    assert [(r, d) for _, r, d in remote] == [(r, d) for _, r, d in local]
    assert [t for t, _, _ in remote[:-1]] == [t for t, _, _ in local[:-1]]
