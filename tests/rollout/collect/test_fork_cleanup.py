"""Many forks and cleanups leave nothing behind: no process, worker, engine or descriptor.

guess_number and ALFWorld fork and close 1,000 times; ReTool's stateful sessions
``RETOOL_FORKS`` times (each fork forks the session's state holder inside its sandbox
worker; 1,000 of those are counted in ``test_sandbox_session_fork.py``).
"""

from __future__ import annotations

import os
import threading

from support import machine_skips
from support.tree_helpers import SeededGuesser

from agentenvs.envs.registry import make
from agentenvs.rollout.collect.tree import BranchSchedule, do_tree_rollout

RETOOL_FORKS = 30


def open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def children_of(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(p) for p in f.read().split()]
    return found


async def test_guess_number_forks_in_a_thousand_leaf_trees_are_all_closed(tokenizer):
    config = make("guess_number", limits={"max_turns": 3}, low=1, high=10**6)
    before = open_fds()
    schedule = BranchSchedule(branch_at=(2,), branch_factor=100, max_live_forks=200)
    forks = 0
    for task in range(10):
        builder = config.group_builder(task, 1, tokenizer)
        group = await do_tree_rollout(builder, SeededGuesser(tokenizer, high=10**6), schedule)
        forks += group.tree["forks"]
    assert forks == 990
    assert open_fds() == before


async def test_a_thousand_alfworld_forks_leave_no_engine_process_or_descriptor(tokenizer):
    config = make("alfworld", data="shipped", workers=1, engines_per_worker=2)
    try:
        env = config.make_env(0, tokenizer)
        await env.initial_observation()
        pool = config.settings().pool()
        worker_pid = env.task.worker_pid
        fds, threads = open_fds(), threading.active_count()
        pids = set()
        for _ in range(1000):
            branch = await env.fork()
            assert branch.task.fork_method == "process"
            pids.add(branch.task.worker_pid)
            await branch.close()
        assert len(pids) > 1
        await env.task.lease.call("ping", timeout=30)  # the worker has reaped its forks
        assert children_of(worker_pid) == []
        assert not pool.forks and pool.pids() == [worker_pid]
        assert open_fds() == fds and threading.active_count() == threads
        assert not [p for p in pids if os.path.exists(f"/proc/{p}")]
        await env.close()
    finally:
        config.shutdown()


@machine_skips.needs(*machine_skips.LOCAL_SANDBOX)
async def test_stateful_retool_forks_leave_no_sandbox_worker(tokenizer):
    from agentenvs.envs.retool.protocol import code_action
    from agentenvs.envs.retool.sandboxes import close_shared_sandboxes, shared_sandbox

    config = make("retool", execution="stateful")
    env = config.make_env(0, tokenizer)
    await env.initial_observation()
    tokens = env.renderer.encode(code_action("x = 5"))
    await env.step(tokens, extra={"stop_reason": "stop"})
    sandbox = await shared_sandbox(config.sandbox)
    try:
        fds = open_fds()
        workers, pids = [], set()
        for _ in range(RETOOL_FORKS):
            branch = await env.fork()
            worker = branch.task._session._worker
            workers.append(worker)
            pids |= worker.host_pids()
            await branch.close()
        # Every fork was a fork of the state holder on the episode's own worker
        # (tests/sandbox/supervisor/test_sandbox_session_fork.py counts the processes inside it).
        assert {id(w) for w in workers} == {id(env.task._session._worker)}
        assert env.task._session._share.sessions == 1
        assert sandbox.host_pids() >= pids
        assert sandbox._session_workers() == [env.task._session._worker]
        # Spare workers are refilled in the background: a few descriptors each, no more.
        assert len(open_fds() - fds) <= 8 * (sandbox.session_spares + 1)
    finally:
        await env.close()
        await close_shared_sandboxes()
