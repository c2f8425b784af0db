"""Where a local vLLM server's processes go (rollout/policies/vllm_cpus.py).

The real server's placement is checked in test_vllm_policy.py; here the plan itself,
including a one-CPU machine (this process restricted to one CPU for the test)."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

import pytest

from agentenvs.rollout.policies.vllm_cpus import ServerCpus, move_process, plan_cpus, thread_cpus


@contextmanager
def affinity(cpus: set[int]):
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def test_auto_gives_the_engine_all_but_the_first_cpu_and_the_api_server_the_rest():
    allowed = sorted(os.sched_getaffinity(0))
    expected = (
        ServerCpus(allowed[1:], allowed[:1]) if len(allowed) > 1 else ServerCpus(allowed, None)
    )
    assert plan_cpus("auto", "auto") == expected


def test_on_one_cpu_everything_stays_together():
    first = min(os.sched_getaffinity(0))
    with affinity({first}):
        assert plan_cpus("auto", "auto") == ServerCpus(engine=[first], frontend=None)


def test_explicit_choices_and_not_pinned():
    assert plan_cpus([1, 0, 1], [0]) == ServerCpus(engine=[0, 1], frontend=[0])
    assert plan_cpus(None, "auto") == ServerCpus(engine=None, frontend=None)
    assert plan_cpus("auto", None).frontend is None
    with pytest.raises(ValueError, match="frontend_cpus"):
        plan_cpus("auto", [])


def test_moving_a_process_moves_every_thread_it_has():
    first = min(os.sched_getaffinity(0))
    started, release = threading.Event(), threading.Event()

    def idle() -> None:
        started.set()
        release.wait()

    worker = threading.Thread(target=idle)
    before = os.sched_getaffinity(0)
    worker.start()
    started.wait()
    try:
        move_process(os.getpid(), [first])
        assert len(thread_cpus(os.getpid())) >= 2
        assert all(cpus == {first} for cpus in thread_cpus(os.getpid()).values())
    finally:
        move_process(os.getpid(), sorted(before))
        release.set()
        worker.join()
