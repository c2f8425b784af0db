"""Each real harness completes a scripted multi-turn task through the gateway, in its jail.

The harnesses are the registries' own packages, installed by ``make harnesses`` (PyPI
``mini-swe-agent``; npm ``@openai/codex``, ``@anthropic-ai/claude-code``, ``opencode-ai``,
``@qwen-code/qwen-code`` with Node 22); none of them can reach anything but its episode's
gateway. The model is :func:`support.harness_agent.agent_script` on the Qwen3 vocabulary
(see there: list the files, fix the bug, run the tests, finish; Claude Code and opencode
delegate the listing to a sub-agent first). Each episode must solve the task (the task's
own tests give reward 1), take several turns, and leave a store that ``agentenvs check``
passes with every sampled token delivered. Where the harness started a sub-agent, its
chain must be a linked segment of the episode: a branch whose parent is an earlier turn,
extended by the sub-agent's later turns. mini-swe-agent's capture is replayed through
``agentenvs rollout`` (its run, in-process), which must reproduce it token for token.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from support import machine_skips
from support.gateway_helpers import ScriptPolicy, qwen3
from support.harness_agent import agent_script
from support.paths import REPO

from agentenvs.envs.harness.config import HarnessConfig
from agentenvs.envs.harness.harnesses import HARNESSES, Installed
from agentenvs.envs.harness.segments import PARENT_LOG, SEGMENT_LOG, START_LOG
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.inspect.check import check_file

pytestmark = machine_skips.needs("bubblewrap", "user-namespaces", "debian-python")

INSTALLED = REPO / ".harnesses"
DELEGATING = {"claude-code", "opencode"}
"""Harnesses whose scripted episode starts a sub-agent."""


def installed() -> Installed:
    found = Installed.find(INSTALLED)
    if not (found.root / "python" / "bin" / "mini").exists():
        pytest.fail(f"no harnesses at {found.root}: run `make harnesses` (make test does)")
    return found


def capture(harness: str, path: Path) -> Any:
    """One episode of ``harness`` on the example task, collected into ``path``."""
    config = HarnessConfig(harness=harness, harnesses_dir=str(installed().root), agent_timeout=180)
    builder = config.group_builder(0, 1, qwen3())
    policy = ScriptPolicy(qwen3(), agent_script)
    result = asyncio.run(
        collect(
            [builder],
            policy,
            CollectOptions(progress=False, retries=0),
            store=TrajectoryStore(path),
        )
    )
    (record,) = result.records
    assert record.status == "ok", f"{record.error}\n{record.traceback}"
    return record


@pytest.mark.parametrize("harness", sorted(HARNESSES))
def test_the_harness_solves_the_task_through_the_gateway(harness: str, tmp_path: Path) -> None:
    store = tmp_path / f"{harness}.jsonl"
    record = capture(harness, store)
    (trajectory,) = record.group.trajectories
    transitions = trajectory.transitions
    output = transitions[-1].logs.get("harness/output", "")
    assert record.group.total_rewards() == [1.0], output
    assert trajectory.stop_reason == "completed"
    assert len(transitions) >= 4, output
    report = check_file(store, tokenizer=qwen3())
    gateway = [f for f in report.findings if "gateway capture" in f.detail]
    assert report.ok, [f for f in report.findings if f.status == "fail"]
    assert gateway and "delivered 100.0%" in gateway[0].detail
    branches = [t for t in transitions if t.logs[START_LOG] == "branch"]
    if harness in DELEGATING:
        sub = next(t for t in branches if "ls" in qwen3().decode(t.ac.tokens))
        parent = transitions[sub.logs[PARENT_LOG]]
        assert sub.logs[PARENT_LOG] >= 0 and "List the files" in qwen3().decode(parent.ac.tokens)
        segment = sub.logs[SEGMENT_LOG]
        chain = [t for t in transitions if t.logs[SEGMENT_LOG] == segment]
        assert len(chain) >= 2 and chain[0] is sub
        assert all(t.logs[START_LOG] == "extend" for t in chain[1:])
    if harness == "mini-swe-agent":
        replay_through_the_rollout_command(store, tmp_path)


def replay_through_the_rollout_command(store: Path, tmp_path: Path) -> None:
    """``agentenvs rollout harness --policy replay``: the same tokens, the same episode."""
    from agentenvs.rollout.cli.rollout_run import run_rollout
    from agentenvs.rollout.collect.spec import (
        DatasetSpec,
        EnvSpec,
        PolicySpec,
        RunSpec,
        StoreSpec,
    )

    replayed = tmp_path / "replayed.jsonl"
    spec = RunSpec(
        EnvSpec("harness", {"harness": "mini-swe-agent", "harnesses_dir": str(installed().root)}),
        DatasetSpec(groups=1, group_size=1),
        policy=PolicySpec("replay", {"path": str(store)}),
        limits=CollectOptions(retries=0, progress=False),
        store=StoreSpec(replayed),
    )
    run = run_rollout(spec, tokenizer=qwen3())
    assert run.summary["ok"] == 1 and run.summary["mean_reward"] == 1.0, run.summary
    (first,) = TrajectoryStore(store).read()
    (second,) = TrajectoryStore(replayed).read()
    old, new = first.group.trajectories[0], second.group.trajectories[0]
    assert [t.ob for t in new.transitions] == [t.ob for t in old.transitions]
    assert [t.ac.tokens for t in new.transitions] == [t.ac.tokens for t in old.transitions]
