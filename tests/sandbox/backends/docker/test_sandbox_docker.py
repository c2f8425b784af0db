"""The docker backend, for real, through a private podman service (Docker-compatible API).

The service and the image (built from this host's Debian files) come from the
session-wide ``podman`` fixture (tests/support/podman_service.py); the tests are skipped
only where the machine has no podman/runc or Debian's Python (``support.machine_skips``):
a service, image build or first container that fails is a failure. The adversarial programs live in the escape suite, which
runs against this backend too; here: the API, the container settings, limits, sessions,
cleanup and failures of the engine itself.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from support import machine_skips
from support.podman_service import STATE, require_podman

from agentenvs.sandbox import ExecStatus, SandboxConfig, SandboxUnavailable, create
from agentenvs.sandbox.backends.docker.backend import DockerSandbox
from agentenvs.sandbox.backends.docker.image import (
    HASH_LABEL,
    IMAGE_TAG,
    content_hash,
    ensure_image,
    image_changes,
    plan_rootfs,
)
from agentenvs.sandbox.backends.docker.podman import PodmanService
from agentenvs.sandbox.backends.docker.worker import INSTANCE_LABEL

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.services]

CONFIG = SandboxConfig(
    backend="docker",
    timeout=3.0,
    memory_limit_mb=256,
    max_processes=32,
    workdir_size_mb=16,
    pool_size=2,
)


def _config(service: PodmanService, **update: object) -> SandboxConfig:
    return CONFIG.model_copy(update={"docker_host": service.docker_host, **update})


@pytest.fixture(scope="session")
def podman() -> PodmanService:
    return require_podman()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sandbox(podman: PodmanService) -> AsyncIterator[DockerSandbox]:
    box = create(_config(podman))
    assert isinstance(box, DockerSandbox)
    async with box:
        yield box


def _containers_of(service: PodmanService, box: DockerSandbox) -> list[str]:
    """Every container the engine holds for this sandbox object, in any state."""
    import docker

    client = docker.DockerClient(base_url=service.docker_host)
    try:
        label = f"{INSTANCE_LABEL}={box.instance_id}"
        return [c.id for c in client.containers.list(all=True, filters={"label": label})]
    finally:
        client.close()


def _host_processes_of(uids: set[int]) -> set[int]:
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        if "\nState:\tZ" in status:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:") and int(line.split()[1]) in uids:
                found.add(int(name))
    return found


def _describe(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "gone"
    return " ".join(line for line in status if line.startswith(("Name", "State", "PPid", "NSpid")))


# --------------------------------------------------------------------------- the image


async def test_image_is_built_once_and_labelled(podman: PodmanService) -> None:
    import docker

    assert STATE.image is not None and STATE.image.tag == IMAGE_TAG
    client = docker.DockerClient(base_url=podman.docker_host)
    try:
        again = ensure_image(client)
        assert not again.built, "an up-to-date image must not be rebuilt"
        assert again.content_hash == STATE.image.content_hash
        labels = client.images.get(IMAGE_TAG).labels
        assert labels[HASH_LABEL] == STATE.image.content_hash
    finally:
        client.close()


async def test_rootfs_plan_holds_python_and_packages_but_no_host_secrets() -> None:
    plan = plan_rootfs()
    names = set(plan.entries)
    assert "usr/bin/python3.11" in names
    assert "usr/lib/python3/dist-packages/numpy/__init__.py" in names
    assert "usr/lib/python3/dist-packages/sympy/__init__.py" in names
    assert any(n.startswith("usr/lib/x86_64-linux-gnu/libc.so") for n in names) or any(
        n.endswith("/libc.so.6") for n in names
    )
    assert not any(
        n.startswith(("etc/shadow", "root/", "home/", "usr/lib/python3.11/test/")) for n in names
    )
    passwd = plan.entries["etc/passwd"].source
    assert "root:" not in passwd and "sandbox:" in passwd
    # the hash follows the recipe
    assert content_hash(plan, image_changes()) != content_hash(plan, [*image_changes(), "ENV X=1"])


# --------------------------------------------------------------------------- runs


async def test_runs_code_and_shows_the_last_expression(sandbox: DockerSandbox) -> None:
    result = await sandbox.run("x = 6\nprint('hi')\nx * 7")
    assert result.status == ExecStatus.OK, result
    assert result.stdout == "hi\n42\n"
    assert result.return_code == 0
    echoed = await sandbox.run("print(input()[::-1])", stdin="olleh\n")
    assert echoed.ok and echoed.stdout == "hello\n", echoed


async def test_numpy_and_sympy_are_preloaded(sandbox: DockerSandbox) -> None:
    result = await sandbox.run(
        "import sys\n"
        "print('numpy' in sys.modules, 'sympy' in sys.modules)\n"
        "import numpy as np, sympy as sp\n"
        "print(int(np.arange(5).sum()), sp.factor(sp.Symbol('x')**2 - 1))"
    )
    assert result.ok, result
    assert result.stdout == "True True\n10 (x - 1)*(x + 1)\n"


async def test_errors_are_reported_not_raised(sandbox: DockerSandbox) -> None:
    result = await sandbox.run("1 / 0")
    assert result.status == ExecStatus.ERROR
    assert "ZeroDivisionError" in result.stderr
    assert "agentenvs" not in result.stderr.splitlines()[1]  # the supervisor's frames are hidden
    exited = await sandbox.run("import sys\nsys.exit(3)")
    assert exited.status == ExecStatus.ERROR and exited.return_code == 3


async def test_runs_as_a_dedicated_non_root_uid_without_capabilities(
    sandbox: DockerSandbox,
) -> None:
    result = await sandbox.run(
        "import os\n"
        "status = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)\n"
        "print(os.getuid(), os.getgid(), status['CapEff'].strip(), status['CapBnd'].strip(),"
        " status['NoNewPrivs'].strip())"
    )
    assert result.ok, result
    uid, gid, cap_eff, cap_bnd, nnp = result.stdout.split()
    assert int(uid) != 0 and int(uid) in sandbox.sandbox_uids() and gid == uid
    assert int(cap_eff, 16) == 0 and int(cap_bnd, 16) == 0
    assert nnp == "1"


async def test_network_is_absent(sandbox: DockerSandbox) -> None:
    result = await sandbox.run(
        "import socket\n"
        "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))\n"
        "for family in (socket.AF_INET, socket.AF_INET6):\n"
        "    try:\n"
        "        socket.socket(family, socket.SOCK_STREAM).connect(('1.1.1.1', 80))\n"
        "        print('connected')\n"
        "    except (OSError, TypeError) as exc:\n"
        "        print(type(exc).__name__)"
    )
    assert result.ok, result
    lines = result.stdout.splitlines()
    assert lines[0] == "['lo']"
    assert "connected" not in lines


async def test_root_is_read_only_and_the_work_dir_is_a_wiped_tmpfs(sandbox: DockerSandbox) -> None:
    result = await sandbox.run(
        "import os\n"
        "refused = []\n"
        "for d in ('/', '/usr', '/etc', '/var/tmp', '/run'):\n"
        "    try:\n"
        "        open(os.path.join(d, 'x'), 'w')\n"
        "    except OSError:\n"
        "        refused.append(d)\n"
        "open('left-behind.txt', 'w').write('x')\n"
        "print(os.getcwd(), refused)"
    )
    assert result.ok, result
    assert result.stdout == "/tmp ['/', '/usr', '/etc', '/var/tmp', '/run']\n"
    for _ in range(CONFIG.pool_size):  # whichever container answers, it is clean
        listing = await sandbox.run("import os\nprint(os.listdir('.'), os.listdir('/dev/shm'))")
        assert listing.ok and listing.stdout == "[] []\n", listing


async def test_timeout_kills_the_program(sandbox: DockerSandbox) -> None:
    result = await sandbox.run(
        "import time\nprint('started', flush=True)\ntime.sleep(60)\nprint('woke')", timeout=1.0
    )
    # it ran (its output so far is kept), was killed at the timeout, and never woke
    assert result.status == ExecStatus.TIMEOUT, result
    assert result.stdout == "started\n", result
    assert (await sandbox.run("print('next')")).stdout == "next\n"
    assert await _lasting_strays(sandbox) == {}  # nothing of it is left on the host


async def test_memory_limits(sandbox: DockerSandbox) -> None:
    # one big allocation: the per-execution address-space limit
    single = await sandbox.run("x = bytearray(2 * 1024**3)")
    assert single.status == ExecStatus.MEMORY, single
    # many processes, each under the per-process limit: the container's cgroup limit
    spread = await sandbox.run(
        "import os, time\n"
        "pids = []\n"
        "for i in range(6):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = b'\\x01' * (200 * 1024 * 1024)\n"
        "        time.sleep(1)\n"
        "        os._exit(0)\n"
        "    pids.append(pid)\n"
        "for pid in pids:\n"
        "    os.waitpid(pid, 0)",
        timeout=20,
    )
    assert spread.status == ExecStatus.MEMORY, spread
    assert (await sandbox.run("print('alive')")).stdout == "alive\n"


async def test_output_is_capped(sandbox: DockerSandbox) -> None:
    result = await sandbox.run("print('x' * 10_000_000)")
    assert result.status == ExecStatus.OUTPUT_LIMIT
    assert result.stdout_truncated and len(result.stdout) <= CONFIG.max_output_bytes


async def test_processes_left_behind_are_killed(sandbox: DockerSandbox) -> None:
    result = await sandbox.run(
        "import os, time\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(3600)\n"
        "        os._exit(0)\n"
        "print('spawned')"
    )
    assert result.ok and result.stdout == "spawned\n", result
    inside = await sandbox.run(
        "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), os.getpid())"
    )
    pids, me = inside.stdout.rsplit(" ", 1)
    # only this execution: /proc shows a run no process outside its own Landlock domain
    # (not even the supervisor), and nothing of the earlier run is left
    assert pids == f"[{int(me)}]", inside.stdout
    assert await _lasting_strays(sandbox) == {}


async def _lasting_strays(sandbox: DockerSandbox, within: float = 5.0) -> dict[int, str]:
    """Sandbox-uid host processes outside every container's own set that are still there.

    One listing of /proc races with processes that are exiting (the run that just
    answered, an engine helper): a leaked process sleeps for an hour, so a stray counts
    only if it is still alive and still outside the containers when the listing is redone.
    """
    deadline = asyncio.get_running_loop().time() + within
    while True:
        strays = _host_processes_of(sandbox.sandbox_uids()) - sandbox.host_pids()
        lasting = {pid: _describe(pid) for pid in strays}
        lasting = {pid: text for pid, text in lasting.items() if text != "gone"}
        if not lasting or asyncio.get_running_loop().time() > deadline:
            return lasting
        await asyncio.sleep(0.2)


async def test_concurrent_runs_use_the_pool(sandbox: DockerSandbox) -> None:
    results = await asyncio.gather(
        *(sandbox.run(f"import time\ntime.sleep(0.3)\nprint({i})") for i in range(6))
    )
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]
    assert len(sandbox.container_ids()) >= CONFIG.pool_size


# --------------------------------------------------------------------------- sessions


async def test_session_keeps_variables_across_failures(sandbox: DockerSandbox) -> None:
    async with sandbox.session() as session:
        assert (await session.run("import numpy as np\nx = np.arange(4)\ncount = 1")).ok
        assert (await session.run("count += 1\nx.sum() + count")).stdout == "8\n"
        crashed = await session.run("import os\nos._exit(7)")
        assert crashed.status == ExecStatus.ERROR
        timed_out = await session.run("while True:\n    count += 1", timeout=1)
        assert timed_out.status == ExecStatus.TIMEOUT
        assert (await session.run("count")).stdout == "2\n"
        # a cell that kills the state holder: the session replays its cells
        killer = await session.run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
        assert killer.status in (ExecStatus.ERROR, ExecStatus.SANDBOX_ERROR, ExecStatus.OK)
        after = await session.run("count, int(x.sum())")
        assert after.ok and after.stdout == "(2, 6)\n", after


async def test_session_survives_its_container_being_killed(
    podman: PodmanService, sandbox: DockerSandbox
) -> None:
    import docker

    async with sandbox.session() as session:
        assert (await session.run("y = 21")).ok
        worker = session._worker
        assert worker is not None
        client = docker.DockerClient(base_url=podman.docker_host)
        try:
            await asyncio.to_thread(client.containers.get(worker.container.id).kill)
        finally:
            client.close()
        result = await session.run("y * 2")
        assert result.ok and result.stdout == "42\n", result
        assert session.replays >= 1


# --------------------------------------------------------------------------- the engine failing


async def test_a_container_killed_mid_run_is_reported_and_replaced(
    podman: PodmanService,
) -> None:
    import docker

    async with DockerSandbox(_config(podman, pool_size=1)) as box:
        (container_id,) = box.container_ids()
        client = docker.DockerClient(base_url=podman.docker_host)
        try:
            run = asyncio.ensure_future(box.run("import time\ntime.sleep(30)", timeout=30))
            await asyncio.sleep(1.0)
            await asyncio.to_thread(client.containers.get(container_id).kill)
            result = await asyncio.wait_for(run, 20)
        finally:
            client.close()
        assert result.status == ExecStatus.SANDBOX_ERROR, result
        assert "died" in result.message or "gone" in result.message
        after = await box.run("print('replaced')")
        assert after.ok and after.stdout == "replaced\n"
        assert box.container_ids() and container_id not in box.container_ids()


async def test_an_unreachable_engine_fails_fast_with_a_clear_message(tmp_path: Path) -> None:
    config = CONFIG.model_copy(update={"docker_host": f"unix://{tmp_path}/nothing.sock"})
    box = DockerSandbox(config)
    with pytest.raises(SandboxUnavailable, match="Docker engine"):
        await asyncio.wait_for(box.start(), 30)
    result = await box.run("print(1)")
    assert result.status == ExecStatus.SANDBOX_ERROR and "Docker engine" in result.message


async def test_close_removes_every_container(podman: PodmanService) -> None:
    box = DockerSandbox(_config(podman, pool_size=2))
    async with box:
        async with box.session() as session:
            assert (await session.run("1")).ok
        assert set(_containers_of(podman, box)) >= box.container_ids() != set()
        uids = box.sandbox_uids()
    assert _containers_of(podman, box) == []
    assert _host_processes_of(uids) == set()


async def test_container_per_call_mode(podman: PodmanService) -> None:
    async with DockerSandbox(_config(podman, pool_size=1), mode="per_call") as box:
        first, second = await box.run("import os\nprint(os.getuid())"), await box.run("print(2)")
        assert first.ok and second.ok and second.stdout == "2\n"
        assert box.stats["containers_started"] >= 3  # the probe's, and one per call
        assert _containers_of(podman, box) == []  # each call's container is gone with it


# --------------------------------------------------------------------------- capability report


async def test_capability_report_and_minimum(podman: PodmanService, sandbox: DockerSandbox) -> None:
    caps = sandbox.capabilities()
    assert caps.backend == "docker"
    # the container's own settings, on any machine that runs it...
    always = (
        "network_isolated",
        "rlimits",
        "no_new_privs",
        "readonly_root",
        "tmpfs_workdir",
        "cleared_env",
        "capabilities_dropped",
    )
    # ...and the README's layers (seccomp, Landlock, cgroup limits, an unprivileged uid)
    # wherever the machine offers them, asked of the machine, not of the report
    for layer in (*always, *sorted(machine_skips.offered_layers())):
        assert caps.active.get(layer), (layer, caps.notes.get(layer))
    with pytest.raises(SandboxUnavailable, match="unknown isolation layer"):
        await DockerSandbox(_config(podman, min_isolation=["teleportation"])).start()
    missing = [name for name, on in caps.active.items() if not on]
    if missing:  # e.g. the user namespace under a rootful engine: refuse, and say why
        box = DockerSandbox(_config(podman, pool_size=1, min_isolation=[missing[0]]))
        with pytest.raises(SandboxUnavailable, match=missing[0]):
            await box.start()
        await box.close()
        assert box.container_ids() == set()


# --------------------------------------------------------------------------- behind the server


async def test_docker_backend_behind_the_run_code_server(sandbox: DockerSandbox) -> None:
    """``agentenvs sandbox serve --backend docker``: the same app, this backend."""
    import httpx

    from agentenvs.sandbox.server.app import create_app

    app = create_app(sandbox)  # already started; the ASGI transport runs no lifespan
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sandbox") as client:
        ok = (
            await client.post("/run_code", json={"code": "print(6 * 7)", "language": "python"})
        ).json()
        assert ok["status"] == "Success" and ok["run_result"]["stdout"] == "42\n", ok
        slow = await client.post(
            "/run_code",
            json={"code": "while True:\n    pass", "language": "python", "run_timeout": 1},
        )
        assert slow.json()["run_result"]["status"] == "TimeLimitExceeded"
        caps = (await client.get("/agentenvs/capabilities")).json()
        assert caps["backend"] == "docker" and caps["active"]["network_isolated"]
