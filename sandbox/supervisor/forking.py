"""Forking a session's state holder, inside the sandbox: the holder's side of ``session_fork``.

A fork is an ``os.fork`` of the idle holder, so the copy starts with the very same
interpreter (variables, generators, imported modules) at no cost beyond copy-on-write.
What a plain ``fork`` would share is dealt with before and after it, because a fork must
not share writable state with its parent:

- memory: private mappings are copied on write; a *shared* writable mapping (``mmap``
  of ``-1``, SysV or POSIX shared memory, a shared file mapping) would stay shared, so a
  holder with one refuses the fork (the host replays the cells instead);
- descriptors: a file open for reading is reopened in the fork at the same offset (its
  own offset from then on); a file open for writing, a pipe, a socket or any other
  kernel object would stay shared, so a holder with one refuses the fork;
- files: the work dir and ``/tmp`` are one tmpfs per worker, so once a session has
  forked, every holder of the worker (the parent on its first fork, each fork at birth,
  any holder started later) drops write access to every directory with a Landlock layer
  of its own, and every change of a file's metadata (mode, owner, times, xattrs, inode
  flags, locks: not Landlock rights) with the ``read_only`` seccomp stage (issue #24).
  The files written before the fork stay readable by both sides: their past is the
  same; neither can change the other's future.
- processes: the fork enters a Landlock domain of its own, and the parent enters a new
  one before it runs its next cell while a fork of it lives (``enter_own_domain``), so
  that they are siblings (issue #40): with ABI >= 6 neither can signal the other (nor
  the supervisor) or connect to the other's abstract unix sockets, neither may trace
  the other, and with ``/proc`` mounted ``hidepid=invisible`` neither sees the other's
  processes at all. A process has at most 16 Landlock layers: a fork of a holder that
  has them all is refused (the host replays instead).

The fork is double-forked, so that it is re-parented to the supervisor (the subreaper)
and reaped there: the intermediate process reopens the files and enters the new Landlock
domain (its exit code tells the parent what failed), then forks the fork, which tells
the supervisor it is ready over its own channel, whose sender pid the kernel vouches for.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat

from .restrictions import Landlock, drop_metadata_changes

READ_ONLY_APPLIED = [False]
"""This process already dropped write access (a flag only to avoid stacking layers: the
restriction itself is the kernel's and cannot be undone)."""
METADATA_DROPPED = [False]
"""This process already loaded the read-only seccomp stage (same: only against stacking)."""


def read_only_spec(spec: dict) -> dict:
    """The worker's Landlock spec with every writable directory made read-only."""
    return {
        "read": [*spec.get("read", []), *spec.get("write", [])],
        "write": [],
        "write_files": list(spec.get("write_files", [])),
    }


def _open_flags(fd: int) -> int:
    with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
        for line in f:
            if line.startswith(b"flags:"):
                return int(line.split()[1], 8)
    return os.O_RDWR


def _open_descriptors(keep: set[int]) -> list[int]:
    fds = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in keep or fd <= 2:
            continue
        try:
            os.fstat(fd)
        except OSError:
            continue  # the listing's own descriptor, closed by now
        fds.append(fd)
    return fds


def _shared_mapping_problem(fields: list[bytes], writable_dirs: list[str]) -> str:
    """A shared mapping stays shared across ``fork``: fine only for a read-only mapping of
    a file nobody in the sandbox can write (glibc maps its gconv cache from ``/usr``)."""
    where = fields[5].decode(errors="replace") if len(fields) >= 6 else ""
    read_only_file = (
        fields[1][1:2] != b"w"
        and where.startswith("/")
        and not where.endswith(" (deleted)")
        and not any(where == d or where.startswith(d.rstrip("/") + "/") for d in writable_dirs)
    )
    if read_only_file:
        return ""
    return f"a shared memory mapping ({where or 'anonymous'}) would stay shared with the fork"


def unforkable_state(keep: set[int], writable_dirs: list[str]) -> str:
    """Why this holder's state cannot be forked without sharing writable state ('' if it can)."""
    for fd in _open_descriptors(keep):
        mode = os.fstat(fd).st_mode
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = "?"
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
            if _open_flags(fd) & os.O_ACCMODE != os.O_RDONLY:
                return f"descriptor {fd} ({target}) is open for writing"
            if target.endswith(" (deleted)"):
                return f"descriptor {fd} ({target}) is a deleted file"
        elif not stat.S_ISCHR(mode):
            return f"descriptor {fd} ({target}) is a pipe, socket or other shared object"
    with open("/proc/self/maps", "rb") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 2 and fields[1][3:4] == b"s":
                problem = _shared_mapping_problem(fields, writable_dirs)
                if problem:
                    return problem
    return ""


def reopen_read_only_files(keep: set[int]) -> str:
    """In the fork: give every open file its own open file description at the same offset."""
    for fd in _open_descriptors(keep):
        info = os.fstat(fd)
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            continue  # character devices (/dev/null...) share no state worth a copy
        path = os.readlink(f"/proc/self/fd/{fd}")
        flags = os.O_RDONLY | (os.O_DIRECTORY if stat.S_ISDIR(info.st_mode) else 0)
        try:
            fresh = os.open(path, flags | os.O_CLOEXEC)
        except OSError as exc:
            return f"could not reopen {path}: {exc}"
        again = os.fstat(fresh)
        if (again.st_dev, again.st_ino) != (info.st_dev, info.st_ino):
            os.close(fresh)
            return f"{path} is no longer the file descriptor {fd} had open"
        with contextlib.suppress(OSError):
            os.lseek(fresh, os.lseek(fd, 0, os.SEEK_CUR), os.SEEK_SET)
        inheritable = os.get_inheritable(fd)
        os.dup2(fresh, fd, inheritable=inheritable)
        os.close(fresh)
    return ""


def fork_holder(sock: socket.socket, msg: dict, channel_fd: int) -> socket.socket | None:
    """Serve one ``fork`` request; in the fork, return its channel (it goes on as a holder
    of the same namespace), in the original report to the supervisor and return ``None``."""
    keep = {sock.fileno(), channel_fd}
    spec = msg.get("landlock") if isinstance(msg.get("landlock"), dict) else {}
    problem = unforkable_state(keep, [str(d) for d in spec.get("write", [])])
    ruleset = None
    if not problem:
        ruleset = Landlock(read_only_spec(spec), scope_signals=True)
        if ruleset.fd < 0 or ruleset.error:
            problem = f"no Landlock to make the fork read-only: {ruleset.error}"
        elif ruleset.abi < SCOPED_ABI:
            problem = (
                f"Landlock ABI {ruleset.abi} cannot scope signals and abstract sockets to a "
                f"branch (ABI {SCOPED_ABI} can)"
            )
    if not problem and not READ_ONLY_APPLIED[0]:
        # The parent first: there is never a moment where a fork and a writer coexist.
        if ruleset is not None and ruleset.restrict_self():
            READ_ONLY_APPLIED[0] = True
        else:
            problem = "the holder could not drop its write access"
    if not problem and not METADATA_DROPPED[0]:
        # Landlock does not cover modes, times, xattrs or locks: a seccomp stage does
        # (the fork inherits it from this process, irreversibly)
        error = drop_metadata_changes()
        if error is None:
            METADATA_DROPPED[0] = True
        else:
            problem = f"the holder could not drop its metadata changes: {error}"
    if problem:
        os.close(channel_fd)
        if ruleset is not None and ruleset.fd >= 0:
            os.close(ruleset.fd)
        _report(sock, {"event": "forked", "ok": False, "message": problem})
        return None
    assert ruleset is not None
    middle = os.fork()
    if middle == 0:
        _become_fork(sock, channel_fd, ruleset)  # returns only in the fork itself
        channel = socket.socket(fileno=channel_fd)
        channel.set_inheritable(False)
        with contextlib.suppress(OSError):
            channel.send(json.dumps({"event": "ready"}).encode())
        return channel
    os.close(channel_fd)
    os.close(ruleset.fd)
    _, status = _wait(middle)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    message = "" if code == 0 else FORK_FAILURES.get(code, "the fork's process died while made")
    _report(sock, {"event": "forked", "ok": not message, "message": message})
    return None


SCOPED_ABI = 6
"""The Landlock ABI that scopes signals and abstract unix sockets to a domain."""


def enter_own_domain(sock: socket.socket, msg: dict) -> None:
    """Serve one ``domain`` request: this holder leaves the Landlock domain its live forks
    are nested in (a new, read-only layer), so that from its next cell on they are
    siblings: neither can signal, trace, see (``/proc``) or reach the other's abstract
    sockets (issue #40, classes 3 and 4). The supervisor asks before it runs a cell in a
    holder whose forks are alive; a holder that cannot (16 layers at most) says so."""
    spec = msg.get("landlock") if isinstance(msg.get("landlock"), dict) else {}
    ruleset = Landlock(read_only_spec(spec), scope_signals=True)
    ok = ruleset.fd >= 0 and not ruleset.error and ruleset.restrict_self()
    if ruleset.fd >= 0:
        os.close(ruleset.fd)
    _report(sock, {"event": "domain", "ok": bool(ok)})


FORK_FAILURES = {
    2: "the fork could not reopen the files its parent had open",
    3: "the fork could not add its own Landlock layer (a process has at most 16: "
    "a fork of a fork of ... this deep is made by replay)",
}
"""The intermediate process's exit codes, as the parent tells the supervisor."""


def _become_fork(sock: socket.socket, channel_fd: int, ruleset: Landlock) -> None:
    """In the intermediate process: reopen the files, enter a Landlock domain of its own,
    fork the fork (orphaned, so the supervisor adopts and reaps it) and exit with a code
    the parent reports (``FORK_FAILURES``). Returns only in the fork."""
    code = 1
    try:
        sock.close()
        if reopen_read_only_files({channel_fd, ruleset.fd}):
            code = 2
        elif not ruleset.restrict_self():
            code = 3
        else:
            os.close(ruleset.fd)
            if os.fork() == 0:
                return
            code = 0
    except BaseException:
        pass
    os._exit(code)


def _wait(pid: int) -> tuple[int, int]:
    while True:
        try:
            return os.waitpid(pid, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            return pid, 1 << 8


def _report(sock: socket.socket, message: dict) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:
        os._exit(0)  # the supervisor is gone
