"""Harness task folders (Harbor's layout) and the harness environment's configuration."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agentenvs.envs.harness.config import EXAMPLE_TASKS, HarnessConfig
from agentenvs.envs.harness.task import TaskError, load_task, load_tasks, read_reward


def test_the_example_task_reads_as_harbor_lays_it_out() -> None:
    (task,) = load_tasks(EXAMPLE_TASKS)
    assert task.name == "fix-calc" and "add(a, b)" in task.instruction
    assert (task.agent_timeout, task.verifier_timeout, task.memory_mb) == (240.0, 60.0, 2048)
    assert (task.tests / "test.sh").is_file() and task.solution is not None
    assert task.workdir is not None and (task.workdir / "calc.py").is_file()
    config = HarnessConfig()
    assert (config.num_tasks("train"), config.task_id(0, "test")) == (1, "test/fix-calc")


def test_a_broken_task_folder_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match=r"no instruction\.md"):
        load_task(tmp_path)
    (tmp_path / "instruction.md").write_text("Do it.")
    with pytest.raises(TaskError, match=r"no tests/test\.sh"):
        load_task(tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("exit 0")
    (tmp_path / "task.toml").write_text("[agent]\ntimeout_sec = -3\n")
    with pytest.raises(TaskError, match="timeout_sec must be a positive number"):
        load_task(tmp_path)
    (tmp_path / "task.toml").write_text("[agent\n")
    with pytest.raises(TaskError, match="not TOML"):
        load_task(tmp_path)
    with pytest.raises(TaskError, match="no task folders"):
        load_tasks(tmp_path / "tests")


def test_rewards_are_read_as_harbor_writes_them(tmp_path: Path) -> None:
    assert (read_reward(tmp_path, 0), read_reward(tmp_path, 1)) == (1.0, 0.0)
    (tmp_path / "reward.json").write_text('{"reward": 0.25}')
    assert read_reward(tmp_path, 1) == 0.25
    (tmp_path / "reward.txt").write_text("0.5\n")
    assert read_reward(tmp_path, 1) == 0.5
    (tmp_path / "reward.txt").write_text("passed")
    assert read_reward(tmp_path, 0) == 0.0


def test_unknown_harnesses_and_formats_are_refused_by_name() -> None:
    with pytest.raises(ValidationError, match="unknown harness 'nope'; known: claude-code"):
        HarnessConfig(harness="nope")
    with pytest.raises(ValidationError, match="not a valid CallFormat"):
        HarnessConfig(tool_format="yaml")
