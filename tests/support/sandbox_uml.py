"""Boot a user-mode Linux kernel (``linux.uml``) with the host's ``/`` as its root.

Why: a test that needs kernel state this machine cannot give (a cgroup v2 hierarchy
that owns the memory and pids controllers, here) runs in a real Linux kernel of its own,
started as an ordinary host process: no privilege, no disk image, no network. The root
is the host's filesystem through ``hostfs``, read-only, so the guest runs this checkout
and its venv as they are; the guest mounts what it needs to write (tmpfs) itself.
The guest program's console output comes back as text.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

UML = "linux.uml"


def ext2_image(path: Path, size_mb: int) -> Path:
    """A sparse, empty ext2 image: a filesystem with a page cache, for the guest."""
    with path.open("wb") as image:
        image.truncate(size_mb * 1024 * 1024)
    subprocess.run(["mkfs.ext2", "-q", "-F", str(path)], check=True, capture_output=True)
    return path


def boot(
    program: Path,
    workdir: Path,
    *,
    disks: tuple[Path, ...] = (),
    memory_mb: int = 1536,
    timeout: float = 600,
) -> str:
    """Run ``python program`` as the guest's only job and return the console output.

    ``workdir`` holds the init script (the guest sees it through hostfs); ``disks`` are
    image files the guest sees as block devices ``/dev/ubda``, ``/dev/ubdb``... The kernel
    powers off when the program ends; past ``timeout`` the whole UML process group is
    killed and what was printed so far is returned.
    """
    binary = shutil.which(UML)
    if binary is None:
        raise FileNotFoundError(f"no {UML} on PATH")
    init = workdir / "init.sh"
    init.write_text(
        "#!/bin/sh\n"
        f"{sys.executable} {program} 2>&1\n"
        "/sbin/poweroff -f 2>/dev/null || echo o > /proc/sysrq-trigger\n"
    )
    init.chmod(0o755)
    argv = [
        binary,
        f"mem={memory_mb}M",
        "root=/dev/root",
        "rootfstype=hostfs",
        "rootflags=/",
        "ro",
        f"init={init}",
        "con=null",
        "con0=fd:0,fd:1",
    ]
    argv += [f"ubd{i}={disk}" for i, disk in enumerate(disks)]
    # the kernel keeps its run files under $HOME/.uml and maps its memory from $TMPDIR
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
    }
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return out
