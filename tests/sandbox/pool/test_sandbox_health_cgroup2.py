"""The health check's cgroup v2 path (issue #24), on a real cgroup v2 hierarchy.

This machine binds the memory and pids controllers to cgroup v1 hierarchies, and a
controller held by v1 cannot join a cgroup v2 mount (a v2 mount made here offers only
``hugetlb``), so no mount made in this kernel can give the check its v2 files. The test
boots a real Linux kernel of its own instead: user-mode Linux, as an unprivileged host
process with the host's ``/`` as its read-only root (``support.sandbox_uml``). There,
``tests/support/sandbox_cgroup2_guest.py`` mounts a pure cgroup v2 hierarchy at
``/sys/fs/cgroup`` (cpu, io, memory, pids all free), runs the real local backend on it
(bubblewrap, seccomp, a v2 group per worker) and reports what happened; this module
asserts on the report. One boot (about a minute) serves every test here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import machine_skips
from support.paths import SUPPORT
from support.sandbox_uml import boot, ext2_image

pytestmark = machine_skips.needs("user-mode-linux", *machine_skips.LOCAL_SANDBOX)

GUEST = SUPPORT / "sandbox_cgroup2_guest.py"
MARK = "CGROUP2-REPORT "


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    workdir: Path = tmp_path_factory.mktemp("uml")
    disk = ext2_image(workdir / "cache.img", 200)
    console = boot(GUEST, workdir, disks=(disk,))
    lines = [line for line in console.splitlines() if line.startswith(MARK)]
    assert lines, f"the guest printed no report; console tail:\n{console[-4000:]}"
    found = json.loads(lines[-1][len(MARK) :])
    assert "error" not in found, found["error"]
    return found


def test_the_guest_is_pure_cgroup_v2_and_the_worker_is_checked_there(report: dict) -> None:
    assert {"memory", "pids"} <= set(report["controllers"]), report["controllers"]
    assert report["first_run"] == ["ok", "1\n"]
    for layer in ("cgroup_memory", "cgroup_pids"):
        active, note = report["cgroup_layers"][layer]
        assert active, note
    health = report["health"]
    assert health["present"], "a worker in a v2 group has no health check"
    assert health["version"] == 2, health
    assert health["memory_dir"] == health["pids_dir"], health  # one unified group
    assert health["baseline_processes"] is not None and health["baseline_memory"] is not None


def test_a_run_cannot_reach_its_groups_limits(report: dict) -> None:
    reach = report["reach"]
    assert reach["status"] == "ok", reach
    assert "written" not in reach["stdout"], reach["stdout"]
    assert reach["limits_after"] == reach["limits_before"], reach


def test_page_cache_charged_by_a_run_is_reclaimed_and_the_worker_kept(report: dict) -> None:
    cached = report["page_cache"]
    assert cached["status"] == "ok" and cached["stdout"] == "read 120\n", cached
    assert cached["memory_after_run_mb"] >= 100, cached  # the run's cache was charged
    assert cached["reclaims"] >= 1, cached  # memory.reclaim was asked
    assert cached["kept"] and cached["health_recycles"] == 0, cached  # and it sufficed
    assert cached["memory_now_mb"] < 48, cached  # the cache was given back


@pytest.mark.parametrize(
    ("scenario", "words"),
    [("processes", "processes in the worker"), ("memory", "MB in use by the worker")],
)
def test_what_the_supervisor_cannot_see_recycles_the_worker(
    report: dict, scenario: str, words: str
) -> None:
    """Processes (``pids.current``) or memory (``memory.current``, after a reclaim)
    charged to the worker's v2 group by a process outside the sandbox."""
    seen = report[scenario]
    assert words in seen["problem"], seen
    assert seen["run"] == ["ok", "2\n"], seen
    assert seen["replaced"] and seen["health_recycles"] == 1, seen
    assert words in seen["recycle_reason"], seen
    assert seen["next_run"] == ["ok", "3\n"], seen
