"""No hang at exit (issue #46, item 3): a run's shutdown ends within a bound, whatever
is still pending.

``agentenvs rollout retool`` without the ``retool`` extra hung forever in 6 of 19
runs after storing its failed groups: ``asyncio.run`` waits without limit for every
leftover task to finish once cancelled, and a sandbox worker being started (its
subprocess pipes half connected) never does. Here: a task that ignores cancellation
(the mechanism, deterministic), every registered environment cancelled mid-episode
by a tiny group timeout, and Ctrl-C; the reported command itself is
``tests/rollout/cli/test_cli_exit.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from pathlib import Path

import pytest
from support.paths import REPO

from agentenvs.rollout import CollectOptions, DatasetSpec, EnvSpec, RunSpec, StoreSpec, run
from agentenvs.rollout.collect.event_loop import GRACE_VAR, run_bounded
from agentenvs.rollout.collect.store import read_store

HANG = 120.0
"""Seconds after which a run that has not returned counts as hung (a failure, not a
measurement: a bounded shutdown returns within seconds)."""


def _children() -> set[int]:
    """This process's direct children (from /proc)."""
    me, found = os.getpid(), set()
    for status in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(status.read_text().rsplit(")", 1)[1].split()[1]) == me:
                found.add(int(status.parent.name))
    return found


@pytest.fixture(autouse=True)
def no_leftover_children():
    """A run cut short can abandon a sandbox worker that was being started; it would
    outlive this test process (making the sandbox's processes die with their driver is
    the sandbox's own work). Kill the children this test left, by pid."""
    before = _children()
    yield
    for pid in _children() - before:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, os.WNOHANG)


def finishes(target, *args) -> tuple[bool, list]:
    """Call ``target(*args)`` in a thread; whether it returned before :data:`HANG`."""
    out: list = []
    worker = threading.Thread(target=lambda: out.append(target(*args)), daemon=True)
    worker.start()
    worker.join(HANG)
    return not worker.is_alive(), out


async def leaves_a_stubborn_task() -> str:
    async def ignores_cancellation() -> None:
        while True:  # what a half-connected subprocess pipe did on Python 3.11
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue

    asyncio.get_running_loop().create_task(ignores_cancellation())
    await asyncio.sleep(0)
    return "stored"


def test_a_task_that_ignores_cancellation_does_not_hold_the_run():
    done, out = finishes(lambda: run_bounded(leaves_a_stubborn_task(), grace=0.2))
    assert done and out == ["stored"]


def test_ctrl_c_cancels_the_run_lets_it_clean_up_then_raises_keyboard_interrupt():
    """As ``asyncio.run`` does: the first Ctrl-C cancels the main task (its ``finally``
    runs: groups handed to the store still land), then ``KeyboardInterrupt``."""
    cleaned = []

    async def main() -> None:
        asyncio.get_running_loop().call_later(0.05, signal.raise_signal, signal.SIGINT)
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned.append(True)

    with pytest.raises(KeyboardInterrupt):
        run_bounded(main(), grace=0.2)
    assert cleaned == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_retool_without_its_extra_ends_its_run(tmp_path, monkeypatch):
    """The reported case, in process: ``math_verify`` (the ``retool`` extra) cannot be
    imported, so every group fails in its first step, after the sandbox worker started;
    the pool's replacement worker is still starting when the run ends."""
    monkeypatch.setitem(sys.modules, "math_verify", None)  # import math_verify fails
    monkeypatch.setenv(GRACE_VAR, "1")
    spec = RunSpec(
        EnvSpec("retool"),
        DatasetSpec(groups=2, group_size=2),
        limits=CollectOptions(progress=False),
        store=StoreSpec(tmp_path / "retool.jsonl"),
    )
    done, out = finishes(run, spec)
    assert done, "the run did not end"
    failed = out[0].result.failed
    assert len(failed) == 2 and all("math_verify" in r.error for r in failed)


def _every_env() -> list[str]:
    from agentenvs.envs.registry import env_names

    return sorted(env_names())


def _overrides(env: str) -> dict:
    """What each env needs to run here: the demo's settings; a server that is not
    there for the env that plays against one (its groups fail to connect)."""
    from agentenvs.rollout.cli.demo import demo_overrides

    if env == "openenv":
        return {"url": "http://127.0.0.1:9", "connect_timeout": 1.0}
    if env == "ors":  # an ORS server nobody started: its groups fail to connect
        return {"url": "http://127.0.0.1:9", "environment": "none", "episodes": 1}
    if env == "harbor":  # the Harbor-format tasks the harbor tests use
        return {"tasks": str(REPO / "tests" / "envs" / "harbor" / "tasks")}
    return demo_overrides(env)


@pytest.mark.parametrize("env", _every_env())
def test_every_env_cancelled_mid_episode_ends_its_run(env, tmp_path, monkeypatch):
    """Each group is abandoned by a group timeout shorter than the env's start-up
    (a sandbox worker starting, a server connecting, a game loading): the run still
    returns, with one record per group."""
    monkeypatch.setenv(GRACE_VAR, "1")
    store = tmp_path / f"{env}.jsonl"
    spec = RunSpec(
        EnvSpec(env, _overrides(env)),
        DatasetSpec(groups=2, group_size=2),
        limits=CollectOptions(concurrency=2, retries=0, group_timeout=0.2, progress=False),
        store=StoreSpec(store),
    )
    done, out = finishes(run, spec)
    assert done, f"{env}: the run did not end"
    assert len(out[0].result.records) == 2
    assert len(read_store(store).records) == 2
