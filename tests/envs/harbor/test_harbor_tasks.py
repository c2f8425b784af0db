"""Harbor-format tasks (``tests/envs/harbor/tasks``, written in Harbor's layout) run in our
local sandbox (bubblewrap) and scored by their own ``tests/test.sh``: each reference
solution passes, an empty answer fails, a model's commands keep their files from one
command to the next, and the store of the oracle run passes ``agentenvs check``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytest_asyncio
from support import machine_skips

from agentenvs.envs.harbor.task import HarborTask, map_paths
from agentenvs.envs.registry import make
from agentenvs.envs.retool.sandboxes import close_shared_sandboxes
from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.inspect.check import check_file
from agentenvs.rollout.policies import make_policy

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    machine_skips.needs(*machine_skips.LOCAL_SANDBOX),
]
TASKS = Path(__file__).with_name("tasks")


@pytest_asyncio.fixture(loop_scope="module", scope="module", autouse=True)
async def _close_sandboxes_after_module():
    yield
    await close_shared_sandboxes()


async def test_the_task_layout_is_read_as_documented():
    task = HarborTask.load(TASKS / "count-lines")
    assert task.workdir == "/app" and task.verifier_timeout == 60.0
    assert task.copies["/app/data/words.txt"].startswith(b"apple\n")
    assert set(task.tests) == {"test.sh"} and set(task.solution) == {"solve.sh"}
    assert task.ignored == ("Dockerfile RUN", "environment.cpus", "environment.memory_mb")
    assert "category:shell" in task.tags()
    config = HarborTask.load(TASKS / "fix-config")
    assert config.copies == {
        "/app/config.json": (TASKS / "fix-config/environment/config.json").read_bytes()
    }
    assert config.verifier_env == {"EXPECTED_PORT": "8080"}
    mapped = map_paths("cat /app/x > /logs/verifier/r; ls /tests /apple", "/app", "/tmp")
    assert mapped == "cat /tmp/app/x > /tmp/logs/verifier/r; ls /tmp/tests /apple"


async def test_reference_solutions_pass_and_empty_answers_fail(tokenizer, tmp_path):
    config = make("harbor", tasks=str(TASKS))
    builders = lambda: [config.group_builder(i, 1, tokenizer) for i in range(2)]  # noqa: E731
    store = TrajectoryStore(tmp_path / "oracle.jsonl")
    solved = await collect(
        builders(), make_policy("scripted"), CollectOptions(progress=False), store=store
    )
    empty = await collect(
        builders(), make_policy("scripted", variant="empty"), CollectOptions(progress=False)
    )
    assert len(solved.ok) == len(empty.ok) == 2, [r.error for r in solved.failed + empty.failed]
    for record in solved.ok:
        (trajectory,) = record.group.trajectories
        assert [t.reward for t in trajectory.transitions] == [0.0, 1.0]
        assert trajectory.transitions[-1].logs["harbor_verifier"] == "ok"
    by_task = {r.group.trajectories[0].transitions[-1].logs["harbor_task"]: r for r in empty.ok}
    for name, record in by_task.items():
        (trajectory,) = record.group.trajectories
        assert [t.reward for t in trajectory.transitions] == [0.0], name
    # reward.json's named rewards land in the metrics: the broken config does not parse.
    config_task = by_task["fix-config"].group.trajectories[0].transitions[-1]
    assert config_task.metrics["harbor/parses"] == 0.0
    report = check_file(store.path, tokenizer=tokenizer)
    assert [f for f in report.findings if f.status == "fail"] == []


class TwoStep:
    """Counts into a scratch file with one command and moves it into place with the next,
    so the answer exists only if the first command's files survived into the second."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.commands = ["grep -c a data/words.txt > scratch.txt", "mv scratch.txt answer.txt"]

    async def __call__(self, ob, stop, *, max_tokens=None) -> TokensWithLogprobs:
        turn = self.tokenizer.decode(ob).count("<|im_start|>assistant") - 1
        if turn < len(self.commands):
            call = {"name": "bash", "arguments": {"command": self.commands[turn]}}
            reply = f"<tool_call>{json.dumps(call)}</tool_call>"
        else:
            reply = "Done."
        tokens = self.tokenizer.encode(reply + "<|im_end|>", add_special_tokens=False)
        return TokensWithLogprobs(tokens, [-0.1] * len(tokens), "eos")


async def test_files_persist_from_one_command_to_the_next(tokenizer):
    config = make("harbor", tasks=str(TASKS / "count-lines"))
    result = await collect(
        [config.group_builder(0, 1, tokenizer)], TwoStep(tokenizer), CollectOptions(progress=False)
    )
    (trajectory,) = result.ok[0].group.trajectories
    assert [t.reward for t in trajectory.transitions] == [0.0, 0.0, 1.0]
    first = trajectory.transitions[0]
    shown = tokenizer.decode(trajectory.transitions[1].ob[len(first.ob) + len(first.ac.tokens) :])
    assert "[exit 0]" in shown
