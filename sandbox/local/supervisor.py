"""The warm supervisor that runs *inside* a sandbox worker.

This file is standalone on purpose: it is executed by the sandboxed interpreter
(Debian's ``/usr/bin/python3`` for the local backend, the image's Python for Docker),
which cannot import agentenvs. Only the standard library is used.

Why it exists: starting an interpreter and importing numpy + sympy costs ~0.6 s; a
``fork()`` of an interpreter that already did costs ~3 ms. The supervisor pre-imports
(and warms up sympy's lazy imports and caches), then serves requests with one fresh
child per execution, forked ahead of time while the host reads the previous answer.
Each child drops what it may do (rlimits, no_new_privs, Landlock; the seccomp filter is
inherited from the supervisor), runs the code with its output on capped pipes, and is
killed together with everything it started when it ends, times out or floods its
output.

Wire protocol, on the supervisor's stdin/stdout (frames: 4-byte big-endian length, then
UTF-8 JSON):

1. Optional bootstrap (see ``BOOTSTRAP`` in the host package): the interpreter is started
   with ``-c BOOTSTRAP`` and the first frame is this file's source, raw bytes.
2. Config frame (host -> supervisor): ``python_path``, ``preload``, ``warmup``, ``workdir``,
   ``scratch_dirs``, ``seccomp_bpf`` (base64 of a classic-BPF program or null),
   ``landlock`` (``{"read": [...], "write": [...], "write_files": [...]}`` or null),
   ``landlock_scope_signals``, ``subreaper``, ``pid_namespace``.
3. ``hello`` event (supervisor -> host), then one response per request:
   ``probe``, ``run``, ``session_open``, ``cell``, ``ping``, ``exit``.

Sessions use a "fork chain": a holder process owns the notebook namespace; for a cell it
forks a child that runs the code in a copy-on-write copy of that namespace. If the cell
finishes (even with an exception, as in Jupyter), the child becomes the new holder and
the old holder is killed; if the cell times out, crashes, runs out of memory or calls
``os._exit``, the child is killed and the old holder's variables are untouched. Nothing is
pickled, so generators, open files and lambdas survive too. If the holder itself is lost
(a cell killed it and then died), the supervisor starts a fresh one and says
``state_lost``: the host replays earlier cells.
"""

from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import ctypes
import errno
import fcntl
import gc
import io
import json
import linecache
import os
import re
import resource
import select
import shutil
import signal
import socket
import struct
import sys
import time
import tokenize
import traceback

MAX_FRAME = 256 * 1024 * 1024
INTERNAL_ERROR_EXIT = 70

PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2

# Landlock: the syscall numbers are the same on x86_64 and aarch64 (unified table).
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
LL_EXECUTE = 1 << 0
LL_WRITE_FILE = 1 << 1
LL_READ_FILE = 1 << 2
LL_READ_DIR = 1 << 3
LL_TRUNCATE = 1 << 14
LL_IOCTL_DEV = 1 << 15
LL_NET_BIND_TCP = 1 << 0
LL_NET_CONNECT_TCP = 1 << 1
LL_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
LL_SCOPE_SIGNAL = 1 << 1

LAST_UNCAUGHT: type | None = None
"""The type of the exception that ended the last cell run in this process, if any."""

MEMORY_ERROR_LINE = re.compile(r"^([\w.]*MemoryError)\b")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int
_libc.prctl.argtypes = [
    ctypes.c_int,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
]


def _prctl(option: int, arg2: int = 0) -> int:
    return _libc.prctl(option, arg2, 0, 0, 0)


SUPERVISOR_NAME = b"sandbox-super"
IDLE_NAME = b"sandbox-idle"
"""The process name of a pre-forked child still waiting for its request."""


def _set_name(name: bytes) -> None:
    buf = ctypes.create_string_buffer(name[:15])
    _libc.prctl(PR_SET_NAME, ctypes.addressof(buf), 0, 0, 0)


# --------------------------------------------------------------------------- framing


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        try:
            chunk = os.read(fd, min(n, 1 << 20))
        except InterruptedError:
            continue
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> dict | None:
    head = _read_exact(fd, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    if size > MAX_FRAME:
        return None
    body = _read_exact(fd, size)
    return None if body is None else json.loads(body)


def write_frame(fd: int, obj: dict) -> None:
    body = json.dumps(obj).encode()
    data = memoryview(struct.pack(">I", len(body)) + body)
    while data:
        try:
            written = os.write(fd, data)
        except InterruptedError:
            continue
        data = data[written:]


# --------------------------------------------------------------------------- isolation


class Landlock:
    """A Landlock ruleset prepared once in the supervisor, applied in each child.

    Read-only beneath ``read`` paths, read-write beneath ``write`` paths, write access to
    the single files in ``write_files`` (``/dev/null``...). Everything else the process
    could reach through the mounts is denied by the kernel, and (ABI >= 4) every TCP
    bind/connect; (ABI >= 6) signals to processes outside the child's domain (the
    supervisor) are refused too.
    """

    def __init__(self, spec: dict, *, scope_signals: bool) -> None:
        self.fd = -1
        self.error: str | None = None
        self.abi = int(
            _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, LANDLOCK_CREATE_RULESET_VERSION)
        )
        if self.abi < 1:
            self.error = f"kernel has no Landlock ({os.strerror(ctypes.get_errno())})"
            self.abi = 0
            return
        fs = (1 << 13) - 1  # ABI 1: execute .. make_sym
        if self.abi >= 2:
            fs |= 1 << 13  # refer
        if self.abi >= 3:
            fs |= LL_TRUNCATE
        if self.abi >= 5:
            fs |= LL_IOCTL_DEV
        net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP if self.abi >= 4 else 0
        scoped = 0
        if self.abi >= 6:
            scoped = LL_SCOPE_ABSTRACT_UNIX_SOCKET | (LL_SCOPE_SIGNAL if scope_signals else 0)
        if self.abi >= 6:
            attr = struct.pack("=QQQ", fs, net, scoped)
        elif self.abi >= 4:
            attr = struct.pack("=QQ", fs, net)
        else:
            attr = struct.pack("=Q", fs)
        buf = ctypes.create_string_buffer(attr, len(attr))
        fd = int(_libc.syscall(SYS_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), 0))
        if fd < 0:
            self.error = f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}"
            return
        self.fd = fd
        os.set_inheritable(fd, False)
        read = LL_EXECUTE | LL_READ_FILE | LL_READ_DIR
        file_rights = LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | (fs & LL_TRUNCATE)
        for path in spec.get("read", []):
            self._add(path, read, read & file_rights)
        for path in spec.get("write", []):
            self._add(path, fs, fs & file_rights)
        for path in spec.get("write_files", []):
            self._add(path, None, LL_READ_FILE | LL_WRITE_FILE | (fs & LL_TRUNCATE))
        self.scoped = scoped

    def _add(self, path: str, dir_rights: int | None, file_rights: int) -> None:
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # absent paths are simply not granted
        try:
            rights = dir_rights if os.path.isdir(path) else file_rights
            if rights is None:
                return
            attr = struct.pack("=Qi", rights, pfd)
            buf = ctypes.create_string_buffer(attr, len(attr))
            if (
                _libc.syscall(SYS_LANDLOCK_ADD_RULE, self.fd, LANDLOCK_RULE_PATH_BENEATH, buf, 0)
                != 0
            ):
                self.error = f"landlock_add_rule({path}) failed: {os.strerror(ctypes.get_errno())}"
        finally:
            os.close(pfd)

    def restrict_self(self) -> bool:
        if self.fd < 0:
            return False
        return _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, self.fd, 0) == 0


def apply_seccomp(bpf: bytes) -> str | None:
    """Load a classic-BPF seccomp program into this process; None on success."""

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    if len(bpf) % 8:
        return "seccomp program size is not a multiple of 8"
    buf = ctypes.create_string_buffer(bpf, len(bpf))
    prog = SockFprog(len(bpf) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if _prctl(PR_SET_NO_NEW_PRIVS, 1) != 0:
        return f"PR_SET_NO_NEW_PRIVS failed: {os.strerror(ctypes.get_errno())}"
    rc = _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0)
    if rc != 0:
        return f"PR_SET_SECCOMP failed: {os.strerror(ctypes.get_errno())}"
    return None


def _vm_bytes() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _set_limit(kind: int, value: int) -> None:
    """Set soft = hard = value, never above the current hard limit (that would fail)."""
    _, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, value))


def restrict_static(landlock: Landlock | None) -> dict:
    """The restrictions that do not depend on the request. Irreversible by design."""
    state = {}
    _prctl(PR_SET_DUMPABLE, 1)  # the supervisor is not dumpable; its children may be
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # under memory pressure, the code dies before the supervisor
    except OSError:
        pass
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    state["no_new_privs"] = _prctl(PR_SET_NO_NEW_PRIVS, 1) == 0
    state["landlock"] = bool(landlock and landlock.restrict_self())
    return state


def apply_limits(limits: dict, *, cpu: tuple[int, int] | None) -> None:
    """rlimits for one execution; soft = hard, so the code cannot raise them again."""
    if cpu is not None:
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft_cpu, hard_cpu = cpu
        if hard != resource.RLIM_INFINITY:
            hard_cpu = min(hard_cpu, hard)
            soft_cpu = min(soft_cpu, hard_cpu)
        resource.setrlimit(resource.RLIMIT_CPU, (soft_cpu, hard_cpu))
    memory = limits.get("memory_bytes")
    if memory:
        _set_limit(resource.RLIMIT_AS, _vm_bytes() + int(memory))
    if limits.get("max_file_bytes") is not None:
        _set_limit(resource.RLIMIT_FSIZE, int(limits["max_file_bytes"]))
    if limits.get("max_processes"):
        _set_limit(resource.RLIMIT_NPROC, int(limits["max_processes"]))
    _set_limit(resource.RLIMIT_NOFILE, int(limits.get("max_open_files", 512)))
    _set_limit(resource.RLIMIT_MEMLOCK, 0)
    _set_limit(resource.RLIMIT_MSGQUEUE, 0)


def restrict_process(
    limits: dict, landlock: Landlock | None, *, cpu: tuple[int, int] | None
) -> dict:
    """Drop what this (freshly forked) process may do. Irreversible by design."""
    apply_limits(limits, cpu=cpu)
    return restrict_static(landlock)


# --------------------------------------------------------------------------- user code


def _user_frames(tb):
    """Drop the supervisor's own frames from the top of a traceback."""
    own = _user_frames.__code__.co_filename  # "agentenvs-supervisor", or this file's path
    while tb is not None and tb.tb_frame.f_code.co_filename == own:
        tb = tb.tb_next
    return tb


def _print_exception(exc: BaseException) -> None:
    try:
        lines = traceback.format_exception(type(exc), exc, _user_frames(exc.__traceback__))
        sys.stderr.write("".join(lines))
    except BaseException:  # a hostile __repr__/__str__ must not take the child down silently
        sys.stderr.write(f"{type(exc).__name__}: <unprintable exception>\n")


def _ends_with_semicolon(code: str) -> bool:
    """A trailing ``;`` hides the value, as in IPython."""
    ignored = {tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER, tokenize.DEDENT}
    last = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type not in ignored:
                last = token
    except (tokenize.TokenError, SyntaxError):
        return False
    return last is not None and last.type == tokenize.OP and last.string == ";"


def run_user_code(code: str, namespace: dict, filename: str, show_last: bool) -> int:
    """Run code as a notebook cell; returns the process exit code it asks for."""
    global LAST_UNCAUGHT
    LAST_UNCAUGHT = None
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        tree = ast.parse(code, filename, "exec")
        last = None
        if (
            show_last
            and tree.body
            and isinstance(tree.body[-1], ast.Expr)
            and not _ends_with_semicolon(code)
        ):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, filename, "exec"), namespace)
        if last is not None:
            value = eval(compile(last, filename, "eval"), namespace)
            if value is not None:
                print(repr(value))
        return 0
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code & 0xFF
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException as exc:
        LAST_UNCAUGHT = type(exc)
        _print_exception(exc)
        return 1


def _install_std_streams() -> None:
    def stream(fd: int, mode: str):
        raw = io.FileIO(fd, mode, closefd=False)
        if mode == "r":
            return io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8", errors="replace")
        return io.TextIOWrapper(
            io.BufferedWriter(raw), encoding="utf-8", errors="backslashreplace", line_buffering=True
        )

    sys.stdin, sys.stdout, sys.stderr = stream(0, "r"), stream(1, "w"), stream(2, "w")
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def _flush_std_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()


def _reset_signals() -> None:
    for sig in (
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGALRM,
        signal.SIGCHLD,
    ):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


# --------------------------------------------------------------------------- output capture


class Capture:
    """Reads a child's stdout/stderr pipes, keeping at most ``limit`` bytes of each."""

    def __init__(self, out_fd: int, err_fd: int, limit: int) -> None:
        self.fds = {out_fd: "stdout", err_fd: "stderr"}
        self.data = {"stdout": bytearray(), "stderr": bytearray()}
        self.truncated = {"stdout": False, "stderr": False}
        self.limit = limit
        self.open = set(self.fds)
        for fd in self.fds:
            os.set_blocking(fd, False)

    @property
    def over(self) -> bool:
        return any(self.truncated.values())

    def read(self, fd: int) -> None:
        name = self.fds[fd]
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            if not chunk:
                self.open.discard(fd)
                return
            buf = self.data[name]
            room = self.limit - len(buf)
            if len(chunk) > room:
                buf += chunk[: max(room, 0)]
                self.truncated[name] = True
            else:
                buf += chunk
            if self.truncated[name]:
                return

    def drain(self, deadline: float) -> None:
        """After every writer is dead: read what is left, until EOF or ``deadline``."""
        poller = select.poll()
        for fd in self.open:
            poller.register(fd, select.POLLIN)
        while self.open and not self.over and time.monotonic() < deadline:
            for fd, _ in poller.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                self.read(fd)
                if fd not in self.open:
                    poller.unregister(fd)

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def text(self, name: str) -> str:
        return bytes(self.data[name]).decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- process cleanup


def reap() -> dict[int, int]:
    """Collect every exited child (the supervisor adopts orphans); pid -> wait status."""
    reaped = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        except InterruptedError:
            continue
        if pid == 0:
            return reaped
        reaped[pid] = status


def _live_pids(uid: int, filter_uid: bool) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                status = f.read()
        except OSError:
            continue
        state = re.search(rb"^State:\s+(\S)", status, re.M)
        if state and state.group(1) in (b"Z", b"X"):
            continue
        if filter_uid:
            uid_line = re.search(rb"^Uid:\s+(\d+)", status, re.M)
            if not uid_line or int(uid_line.group(1)) != uid:
                continue
        pids.append(int(name))
    return pids


class Sweeper:
    """Kills whatever an execution left behind.

    As pid 1 of its own pid namespace (bubblewrap ``--as-pid-1``), or as the only
    process of a dedicated uid, ``kill(-1, SIGKILL)`` reaches exactly the sandbox's
    other processes and nothing else; daemons that ``setsid`` away are included, and
    orphans are re-parented to the supervisor (init, or a child subreaper), so "no child
    left to wait for" means "nothing left alive". Signals to pid 1 from inside its
    namespace are dropped by the kernel, so the code cannot kill the supervisor. When one
    process must survive (a session's state holder), the others are listed from /proc
    and killed until none is left.
    """

    def __init__(self, pid_namespace: bool) -> None:
        self.pid_namespace = pid_namespace
        self.uid = os.getuid()
        self.me = os.getpid()
        self.reaped: dict[int, int] = {}

    def reap(self) -> None:
        self.reaped.update(reap())

    def kill_all(self, timeout: float = 5.0) -> bool:
        with contextlib.suppress(OSError):  # ESRCH: nothing else was alive
            os.kill(-1, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while True:
            self.reap()
            try:
                os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.0002)

    def kill_except(self, keep: set[int], timeout: float = 5.0) -> bool:
        keep_set = frozenset(keep)
        deadline = time.monotonic() + timeout
        rounds = 0
        while True:
            self.reap()
            victims = [
                p
                for p in _live_pids(self.uid, not self.pid_namespace)
                if p != self.me and p not in keep_set
            ]
            if not victims:
                return True
            for pid in victims:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                return False
            rounds += 1
            time.sleep(min(0.0002 * rounds, 0.01))


def wipe(directory: str) -> bool:
    """Empty a directory the code could write to; True when it is empty afterwards."""

    def loosen_and_retry(func, path, _exc_info):
        for target in (os.path.dirname(path), path):
            with contextlib.suppress(OSError, NotImplementedError):
                os.chmod(target, 0o700, follow_symlinks=False)
        with contextlib.suppress(OSError):
            func(path)

    try:
        entries = list(os.scandir(directory))
    except OSError:
        return False
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, onerror=loosen_and_retry)
            else:
                os.unlink(entry.path)
        except OSError:
            pass
    try:
        return not os.listdir(directory)
    except OSError:
        return False


# --------------------------------------------------------------------------- the supervisor


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"killed by signal {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exited with code {os.WEXITSTATUS(status)}"


def _return_code(status: int | None) -> int | None:
    if status is None:
        return None
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _memory_error_in(stderr: str) -> bool:
    lines = [line for line in stderr.rstrip().splitlines() if line.strip()]
    return bool(lines) and MEMORY_ERROR_LINE.match(lines[-1]) is not None


def classify(
    *,
    status: int | None,
    capture: Capture,
    timed_out: bool,
    timeout: float,
    cpu_seconds: float | None,
    cpu_used: float,
) -> tuple[str, str]:
    if capture.over:
        which = " and ".join(name for name, cut in capture.truncated.items() if cut)
        return "output_limit", f"{which} exceeded {capture.limit} bytes; the program was killed"
    if timed_out:
        return "timeout", f"timed out after {timeout:g} s (wall clock); the program was killed"
    if status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU or (
            sig == signal.SIGKILL and cpu_seconds is not None and cpu_used >= cpu_seconds - 0.05
        ):
            return (
                "timeout",
                f"exceeded the CPU time limit ({cpu_seconds:g} s); the program was killed",
            )
    stderr = capture.text("stderr")
    if status is not None and _return_code(status) != 0 and _memory_error_in(stderr):
        return "memory", "the program ran out of memory (MemoryError)"
    if status is None:
        return "error", "the program's exit status is unknown"
    if _return_code(status) != 0:
        return "error", _status_text(status)
    return "ok", ""


def _result(
    status: str, message: str, capture: Capture, code: int | None, duration: float, **extra
) -> dict:
    return {
        "status": status,
        "message": message,
        "stdout": capture.text("stdout"),
        "stderr": capture.text("stderr"),
        "stdout_truncated": capture.truncated["stdout"],
        "stderr_truncated": capture.truncated["stderr"],
        "return_code": code,
        "duration": duration,
        **extra,
    }


def _text_fd(data: str | None, name: str = "stdin") -> int:
    """A readable descriptor holding ``data`` (a memfd: no pipe-buffer deadlock), or /dev/null."""
    if data is None:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    payload = data.encode("utf-8", errors="surrogateescape")
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _reported_exit(pid: int) -> int | None:
    """The exit code a finished child put in its name (``exit:<code>``), if it did."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            name = f.read().strip()
    except OSError:
        return None
    if name.startswith(b"exit:") and name[5:].isdigit():
        return int(name[5:])
    return None


def _cpu_limits(limits: dict) -> tuple[int, int]:
    cpu = float(limits.get("cpu_seconds") or float(limits.get("timeout", 10)) + 1)
    soft = max(1, int(cpu + 0.999))
    return soft, soft + 1


class Prepared:
    """A forked child waiting for its request (see ``Supervisor._prefork``)."""

    def __init__(self, pid: int, ctrl: int, out_r: int, err_r: int) -> None:
        self.pid, self.ctrl, self.out_r, self.err_r = pid, ctrl, out_r, err_r

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(self.pid, 0)
        for fd in (self.ctrl, self.out_r, self.err_r):
            with contextlib.suppress(OSError):
                os.close(fd)


class Supervisor:
    def __init__(self, proto_in: int, proto_out: int, config: dict) -> None:
        self.proto_in = proto_in
        self.proto_out = proto_out
        self.config = config
        self.workdir = config.get("workdir", "/tmp")
        self.scratch = [self.workdir, *config.get("scratch_dirs", [])]
        self.sweeper = Sweeper(bool(config.get("pid_namespace")))
        self.landlock: Landlock | None = None
        self.session: Holder | None = None
        self.prepared: Prepared | None = None
        self.pending_reap: list[int] = []
        self.needs_cleanup = False
        """The last run was answered before its processes were reaped and dirs wiped."""
        self.dirty = False
        """Cleanup failed: this worker must not run anything else (the host recycles it)."""
        self.hello: dict = {
            "event": "hello",
            "pid": os.getpid(),
            "uid": os.getuid(),
            "python": sys.version,
        }

    # -- setup ---------------------------------------------------------------------
    def setup(self) -> None:
        for entry in self.config.get("python_path", []):
            path = entry.format(major=sys.version_info[0], minor=sys.version_info[1])
            if path not in sys.path:
                sys.path.append(path)
        preloaded, errors = [], {}
        for name in self.config.get("preload", []):
            try:
                __import__(name)
                preloaded.append(name)
            except BaseException as exc:  # a broken optional package must not stop the worker
                errors[name] = f"{type(exc).__name__}: {exc}"
        self.hello.update(preloaded=preloaded, preload_errors=errors)
        warmup = self.config.get("warmup")
        if warmup:
            # Trusted code from the host, run once here so that every forked child starts
            # with the libraries' lazy imports and caches already filled.
            started = time.monotonic()
            try:
                exec(compile(warmup, "<warmup>", "exec"), {"__name__": "__warmup__"})
                self.hello["warmup_seconds"] = round(time.monotonic() - started, 3)
            except BaseException as exc:
                self.hello["warmup_error"] = f"{type(exc).__name__}: {exc}"
        _prctl(PR_SET_DUMPABLE, 0)  # /proc/<supervisor>/{mem,environ} unreadable by the code
        if self.config.get("subreaper", True):
            _prctl(PR_SET_CHILD_SUBREAPER, 1)
        spec = self.config.get("landlock")
        if spec is not None:
            self.landlock = Landlock(
                spec, scope_signals=bool(self.config.get("landlock_scope_signals", True))
            )
            self.hello.update(landlock_abi=self.landlock.abi, landlock_error=self.landlock.error)
        else:
            self.hello.update(landlock_abi=None, landlock_error="disabled by the host")
        bpf = self.config.get("seccomp_bpf")
        if bpf:
            error = apply_seccomp(base64.b64decode(bpf))
            self.hello.update(seccomp=error is None, seccomp_error=error)
        else:
            self.hello.update(seccomp=False, seccomp_error="no filter given by the host")
        try:
            os.chdir(self.workdir)
        except OSError as exc:
            self.hello["workdir_error"] = str(exc)
        gc.collect()
        gc.freeze()  # keep the pre-imported heap out of the collector: fewer copy-on-write faults
        self.hello["vm_bytes"] = _vm_bytes()

    # -- loop ----------------------------------------------------------------------
    def serve(self) -> None:
        write_frame(self.proto_out, self.hello)
        handlers = {
            "ping": lambda req: {"ok": True},
            "probe": self.probe,
            "run": self.run,
            "session_open": self.session_open,
            "cell": self.cell,
        }
        while True:
            req = read_frame(self.proto_in)
            if req is None or req.get("op") == "exit":
                self.sweeper.kill_all(timeout=2.0)
                return
            handler = handlers.get(req.get("op"))
            if req.get("op") in ("probe", "session_open"):
                self.discard_prepared()  # they sweep every process but the supervisor
            try:
                resp = (
                    handler(req)
                    if handler
                    else {"status": "sandbox_error", "message": "unknown op"}
                )
            except Exception as exc:  # never die on a bad request: report and recycle
                where = traceback.extract_tb(exc.__traceback__)[-1]
                resp = {
                    "status": "sandbox_error",
                    "message": f"supervisor error: {type(exc).__name__}: {exc} (line {where.lineno}: {where.line})",
                    "recycle": True,
                }
            resp["id"] = req.get("id")
            write_frame(self.proto_out, resp)
            self.after_response(req.get("op"))

    # -- stateless runs -------------------------------------------------------------
    def _spawn(self, body, limits: dict, stdin: str | None, cpu: tuple[int, int] | None):
        """Fork a child restricted like an execution that runs ``body`` (used by the probe)."""
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        in_fd = _text_fd(stdin)
        pid = os.fork()
        if pid == 0:  # child: never returns
            rc = INTERNAL_ERROR_EXIT
            try:
                os.setsid()
                os.dup2(in_fd, 0)
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                state = restrict_process(limits, self.landlock, cpu=cpu)
                os.closerange(3, 1 << 16)
                os.chdir(self.workdir)
                _reset_signals()
                _install_std_streams()
                rc = body(state)
                _flush_std_streams()
            except BaseException:
                _internal_failure()
            finally:
                os._exit(rc)
        for fd in (out_w, err_w, in_fd):
            os.close(fd)
        return pid, Capture(out_r, err_r, int(limits.get("max_output_bytes", 65536)))

    def _wait(
        self, pid: int, capture: Capture, deadline: float, *, early: bool = False
    ) -> tuple[bool, bool, int | None]:
        """Pump output until the child exits (or says it is done), floods or runs out of time.

        Returns (exited, timed_out, reported exit code). With ``early``, a child that closed
        both outputs and named itself ``exit:<code>`` counts as done before its teardown.
        """
        pidfd = os.pidfd_open(pid)
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            for fd in capture.open:
                poller.register(fd, select.POLLIN)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False, True, None
                for fd, _ in poller.poll(max(1, int(remaining * 1000))):
                    if fd == pidfd:
                        return True, False, None
                    capture.read(fd)
                    if fd not in capture.open:
                        poller.unregister(fd)
                        if early and not capture.open:
                            reported = _reported_exit(pid)
                            if reported is not None:
                                return False, False, reported
                if capture.over:
                    return False, False, None
        finally:
            os.close(pidfd)

    def _prefork(self) -> Prepared:
        """Fork the next execution's child ahead of time (off the request's critical path).

        The child restricts itself (session, descriptors, no_new_privs, Landlock) and waits
        for its request on a private pipe; the per-request rlimits come with the request.
        """
        ctrl_r, ctrl_w = os.pipe2(os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        _set_name(IDLE_NAME)  # inherited from birth: the host tells this child from leftovers
        pid = os.fork()
        if pid == 0:  # child: never returns
            rc = INTERNAL_ERROR_EXIT
            try:
                os.setsid()
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                restrict_static(self.landlock)
                os.dup2(ctrl_r, 3, inheritable=False)
                os.closerange(4, 1 << 16)
                os.chdir(self.workdir)
                _reset_signals()
                req = read_frame(3)
                os.close(3)
                if req is None:
                    os._exit(0)
                _set_name(b"python3")
                limits = req.get("limits", {})
                apply_limits(limits, cpu=_cpu_limits(limits))
                if req.get("stdin") is not None:
                    os.dup2(_text_fd(str(req["stdin"])), 0)
                _install_std_streams()
                me = os.getpid()
                namespace = {"__name__": "__main__", "__builtins__": builtins}
                rc = run_user_code(
                    str(req.get("code", "")), namespace, "<cell>", bool(req.get("show_last", True))
                )
                if os.getpid() != me:  # a fork of the code fell through: leave quietly
                    os._exit(rc)
                _flush_std_streams()
                # Done: put the exit code in the process name and close the output, so the
                # supervisor can answer without waiting for this process's teardown (~3 ms for
                # a numpy+sympy address space). No descriptor is involved; the code could do
                # the same, and would only end itself early.
                _set_name(b"exit:%d" % (rc & 0xFF))
                os.close(1)
                os.close(2)
            except BaseException:
                _internal_failure()
            finally:
                os._exit(rc)
        _set_name(SUPERVISOR_NAME)
        for fd in (ctrl_r, out_w, err_w):
            os.close(fd)
        return Prepared(pid, ctrl_w, out_r, err_r)

    def discard_prepared(self) -> None:
        if self.prepared is not None:
            self.prepared.discard()
            self.prepared = None
            self.sweeper.reap()

    def finish_cleanup(self) -> None:
        """Reap what the fast path killed and wipe the work dirs, before anything else runs."""
        self.needs_cleanup = False
        clean = self._cleanup()
        wiped = all([wipe(d) for d in self.scratch])
        self.dirty = not (clean and wiped)

    def after_response(self, op: str | None) -> None:
        """Work kept off the request's latency: reap killed processes, fork the next child."""
        if self.needs_cleanup:
            self.finish_cleanup()
        while self.pending_reap:
            pid = self.pending_reap.pop()
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:  # not our child (cannot happen in a pid namespace)
                deadline = time.monotonic() + 2.0
                while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                    time.sleep(0.001)
            except OSError:
                pass
        if op == "run":
            self.prepare_next()

    def prepare_next(self) -> None:
        if self.prepared is None and self.session is None and not self.dirty:
            try:
                self.prepared = self._prefork()
            except OSError:
                self.prepared = None

    def run(self, req: dict) -> dict:
        if self.needs_cleanup:
            self.finish_cleanup()
        if self.dirty:
            return {
                "status": "sandbox_error",
                "message": "the previous execution's processes or files could not be removed",
                "recycle": True,
                "not_run": True,
            }
        limits = req.get("limits", {})
        timeout = float(limits.get("timeout", 10))
        cpu = _cpu_limits(limits)
        job = {
            "code": req.get("code", ""),
            "limits": limits,
            "stdin": req.get("stdin"),
            "show_last": bool(req.get("show_last", True)),
        }
        prepared, self.prepared = self.prepared, None
        for _ in range(2):
            if prepared is None:
                prepared = self._prefork()
            start = time.monotonic()
            try:
                write_frame(prepared.ctrl, job)
                break
            except OSError:  # the prepared child is gone: fork a fresh one
                prepared.discard()
                self.sweeper.reap()
                prepared = None
        else:
            return {
                "status": "sandbox_error",
                "message": "could not start the execution",
                "recycle": True,
            }
        os.close(prepared.ctrl)
        pid, capture = (
            prepared.pid,
            Capture(prepared.out_r, prepared.err_r, int(limits.get("max_output_bytes", 65536))),
        )
        exited, timed_out, reported = self._wait(
            pid, capture, start + timeout, early=self.session is None
        )
        if reported is not None and self.session is None:
            # Fast path: the code finished and closed its output. Kill whatever is left (the
            # child included) now; reaping and wiping happen after the answer, before the
            # next request is read (``after_response``).
            duration = time.monotonic() - start
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)
            self.needs_cleanup = True
            capture.drain(time.monotonic() + 1.0)
            capture.close()
            kind, message = classify(
                status=(reported & 0xFF) << 8,
                capture=capture,
                timed_out=False,
                timeout=timeout,
                cpu_seconds=cpu[0],
                cpu_used=0.0,
            )
            return _result(kind, message, capture, reported & 0xFF, duration)
        if not exited:
            os.kill(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
        duration = time.monotonic() - start
        clean = self._cleanup()
        capture.drain(time.monotonic() + 1.0)
        capture.close()
        wiped = all([wipe(d) for d in self.scratch])
        kind, message = classify(
            status=status,
            capture=capture,
            timed_out=timed_out,
            timeout=timeout,
            cpu_seconds=cpu[0],
            cpu_used=usage.ru_utime + usage.ru_stime,
        )
        return _result(
            kind, message, capture, _return_code(status), duration, recycle=not (clean and wiped)
        )

    def _cleanup(self) -> bool:
        if self.session is not None and self.session.alive():
            return self.sweeper.kill_except({self.session.pid})
        return self.sweeper.kill_all()

    # -- probe -----------------------------------------------------------------------
    def probe(self, req: dict) -> dict:
        """Fork a child restricted exactly like an execution and report what it can do."""
        limits = req.get("limits", {})
        workdir = self.workdir

        def body(state: dict) -> int:
            report = {"restrict": state, "uid": os.getuid(), "env_keys": sorted(os.environ)}
            report["rlimits"] = {
                name: list(resource.getrlimit(getattr(resource, f"RLIMIT_{name}")))
                for name in ("CPU", "AS", "FSIZE", "NPROC", "NOFILE", "CORE")
            }
            with open("/proc/self/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            report["no_new_privs"] = status.get("NoNewPrivs", "").strip() == "1"
            report["seccomp_mode"] = status.get("Seccomp", "").strip()
            writes = {}
            for target in ("/", "/usr", "/etc", "/var/tmp", "/home"):
                path = os.path.join(target, ".agentenvs-probe")
                try:
                    with open(path, "w") as f:
                        f.write("x")
                    os.unlink(path)
                    writes[target] = "writable"
                except OSError as exc:
                    writes[target] = errno.errorcode.get(exc.errno or 0, str(exc))
            report["system_writes"] = writes
            try:
                with open(os.path.join(workdir, ".agentenvs-probe"), "w") as f:
                    f.write("x")
                os.unlink(os.path.join(workdir, ".agentenvs-probe"))
                report["workdir_writable"] = True
            except OSError:
                report["workdir_writable"] = False
            report["workdir_mount"] = None
            try:
                with open("/proc/self/mountinfo") as f:
                    for line in f:
                        left, _, right = line.partition(" - ")
                        if left.split()[4] == workdir:
                            fstype, _source, options = right.split()[:3]
                            report["workdir_mount"] = {"fstype": fstype, "options": options}
            except OSError:
                pass
            try:
                socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
                report["inet_socket"] = "allowed"
            except OSError as exc:
                report["inet_socket"] = errno.errorcode.get(exc.errno or 0, str(exc))
            try:
                with open("/proc/net/dev") as f:
                    report["interfaces"] = [
                        line.split(":")[0].strip() for line in f.readlines()[2:]
                    ]
            except OSError:
                report["interfaces"] = None
            sys.stdout.write(json.dumps(report))
            return 0

        start = time.monotonic()
        pid, capture = self._spawn(body, limits, None, _cpu_limits(limits))
        exited, _, _ = self._wait(pid, capture, start + 30)
        if not exited:
            os.kill(pid, signal.SIGKILL)
        os.wait4(pid, 0)
        self._cleanup()
        capture.drain(time.monotonic() + 1.0)
        capture.close()
        wipe(self.workdir)
        try:
            report = json.loads(capture.text("stdout"))
        except ValueError:
            return {
                "ok": False,
                "message": "probe failed",
                "stderr": capture.text("stderr")[-4000:],
            }
        return {"ok": True, "report": report}

    # -- sessions ----------------------------------------------------------------------
    def session_open(self, req: dict) -> dict:
        if self.session is not None:
            self.session.close()
        self.session = Holder(self, req.get("limits", {}))
        return {"ok": True}

    def cell(self, req: dict) -> dict:
        if self.session is None:
            return {"status": "sandbox_error", "message": "no session is open"}
        return self.session.run_cell(req)


class Holder:
    """The supervisor's side of one session's fork chain (see the module docstring)."""

    def __init__(self, sup: Supervisor, limits: dict) -> None:
        self.sup = sup
        self.limits = limits
        cpu_soft, _ = _cpu_limits(limits)
        # Per-cell CPU is a soft limit set by each cell; the hard one, fixed here, is a
        # generous cap for a whole chain (the wall-clock timeout is the real bound).
        self.cpu_hard = cpu_soft * 10 + 1
        self.seq = 0
        self.sock: socket.socket | None = None
        self.pid = 0
        self.pidfd = -1
        self._start()

    def _start(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            rc = INTERNAL_ERROR_EXIT
            try:
                parent.close()
                os.setsid()
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                restrict_process(self.limits, self.sup.landlock, cpu=(self.cpu_hard, self.cpu_hard))
                keep = child.fileno()
                os.closerange(3, keep)
                os.closerange(keep + 1, 1 << 16)
                os.chdir(self.sup.workdir)
                _reset_signals()
                holder_loop(child)
            finally:
                os._exit(rc)
        child.close()
        parent.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock = parent
        self._track(pid)

    def _track(self, pid: int) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
        self.pid = pid
        try:
            self.pidfd = os.pidfd_open(pid)
        except OSError:
            self.pidfd = -1

    def alive(self) -> bool:
        if self.pidfd < 0:
            return False
        ready, _, _ = select.select([self.pidfd], [], [], 0)
        return not ready

    def close(self) -> None:
        self.sup.sweeper.kill_all(timeout=2.0)
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1

    def _recv(self) -> tuple[dict | None, int]:
        """One message from the chain, with the sender's pid as the kernel vouches for it."""
        assert self.sock is not None
        try:
            data, ancdata, _flags, _addr = self.sock.recvmsg(
                65536, socket.CMSG_SPACE(12), socket.MSG_DONTWAIT
            )
        except (BlockingIOError, InterruptedError):
            return None, 0
        sender = 0
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= 12:
                sender = struct.unpack("=iII", payload[:12])[0]
        if not data:
            return {"event": "eof"}, sender
        try:
            msg = json.loads(data)
        except ValueError:
            return None, sender
        return (msg if isinstance(msg, dict) else None), sender

    def _flush_stale(self) -> None:
        while True:
            msg, _ = self._recv()
            if msg is None or msg.get("event") == "eof":
                return

    def _restart(self) -> None:
        self.close()
        self._start()

    def run_cell(self, req: dict) -> dict:
        limits = self.limits
        timeout = float(req.get("timeout") or limits.get("timeout", 10))
        cpu_soft = min(
            _cpu_limits({**limits, "timeout": timeout, "cpu_seconds": req.get("cpu_seconds")})[0],
            self.cpu_hard - 1,
        )
        state_lost = False
        if not self.alive():
            self._restart()
            return {
                "status": "sandbox_error",
                "message": "the session's state holder was gone; a fresh one was started",
                "state_lost": True,
                "not_run": True,
            }
        self._flush_stale()
        self.seq += 1
        seq = self.seq
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        in_fd = _text_fd(req.get("stdin"))
        code_fd = _text_fd(str(req.get("code", "")), "code")
        capture = Capture(out_r, err_r, int(limits.get("max_output_bytes", 65536)))
        message = {
            "op": "cell",
            "seq": seq,
            "show_last": bool(req.get("show_last", True)),
            "cpu": cpu_soft,
            "filename": f"<cell-{seq}>",
        }
        start = time.monotonic()
        try:
            socket.send_fds(
                self.sock, [json.dumps(message).encode()], [in_fd, out_w, err_w, code_fd]
            )
        except OSError:
            for fd in (in_fd, out_w, err_w, code_fd):
                os.close(fd)
            capture.close()
            self._restart()
            return {
                "status": "sandbox_error",
                "message": "the session's state holder was gone; a fresh one was started",
                "state_lost": True,
                "not_run": True,
            }
        for fd in (in_fd, out_w, err_w, code_fd):
            os.close(fd)

        deadline = start + timeout
        cell_pid, cell_pidfd = 0, -1
        adopted_pid, rc_reported, status = 0, None, None
        cpu_used = 0.0
        timed_out = cell_exited = False
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        if self.pidfd >= 0:
            poller.register(self.pidfd, select.POLLIN)
        for fd in capture.open:
            poller.register(fd, select.POLLIN)
        try:
            while not (adopted_pid or cell_exited or capture.over):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                for fd, _ in poller.poll(max(1, int(remaining * 1000))):
                    if fd == self.sock.fileno():
                        msg, sender = self._recv()
                        if msg is None or msg.get("seq") != seq:
                            if msg is not None and msg.get("event") == "eof":
                                poller.unregister(fd)  # every end of the chain is closed: all dead
                                cell_exited = True
                            continue
                        event = msg.get("event")
                        if event == "started" and sender == self.pid and cell_pidfd < 0:
                            pid = msg.get("pid")
                            if isinstance(pid, int) and pid > 1:
                                cell_pid = pid
                                try:
                                    cell_pidfd = os.pidfd_open(pid)
                                    poller.register(cell_pidfd, select.POLLIN)
                                except OSError:
                                    cell_exited = True
                        elif event == "done" and sender not in (0, 1, os.getpid(), self.pid):
                            adopted_pid = sender
                            rc_reported = msg.get("rc") if isinstance(msg.get("rc"), int) else 1
                        elif event == "died" and sender == self.pid:
                            status, cpu_used = _died_report(msg)
                            cell_exited = True
                    elif fd == self.pidfd:
                        poller.unregister(fd)
                        if not cell_pid:
                            cell_exited = True  # it died before forking the cell
                    elif fd == cell_pidfd:
                        cell_exited = True
                    else:
                        capture.read(fd)
                        if fd not in capture.open:
                            poller.unregister(fd)
        finally:
            if cell_pidfd >= 0:
                os.close(cell_pidfd)
        duration = time.monotonic() - start

        sweeper = self.sup.sweeper
        spare = set()
        if adopted_pid:
            previous = self.pid
            self._track(adopted_pid)
            with contextlib.suppress(OSError):
                os.kill(previous, signal.SIGKILL)
            # Killed now (it cannot run anything any more); its teardown and reaping happen
            # after the answer is sent, off the cell's latency.
            self.sup.pending_reap.append(previous)
            spare.add(previous)
        sweeper.reaped.clear()
        clean = sweeper.kill_except(({self.pid} if self.alive() else set()) | spare)
        if status is None and cell_pid in sweeper.reaped:  # an orphaned cell, re-parented to us
            status = sweeper.reaped[cell_pid]
        if not adopted_pid and status is None and self.alive():
            status, cpu_used = self._await_died(seq)
        capture.drain(time.monotonic() + 1.0)
        capture.close()

        status_word = (
            ((rc_reported if rc_reported is not None else 1) & 0xFF) << 8 if adopted_pid else status
        )
        kind, text = classify(
            status=status_word,
            capture=capture,
            timed_out=timed_out,
            timeout=timeout,
            cpu_seconds=float(cpu_soft),
            cpu_used=cpu_used,
        )
        if not adopted_pid and kind == "ok":
            text = (
                "the cell's process exited before the end of the cell; its variables were discarded"
            )
        if not clean or (not adopted_pid and not self.alive()):
            self._restart()
            state_lost = True
        notes = [text] if text else []
        if not adopted_pid and kind != "ok" and not state_lost:
            notes.append("variables from earlier cells are kept")
        if state_lost:
            notes.append("the session's state holder was lost and has been restarted empty")
        return _result(
            kind,
            "; ".join(notes),
            capture,
            _return_code(status_word),
            duration,
            adopted=bool(adopted_pid),
            state_lost=state_lost,
        )

    def _await_died(self, seq: int) -> tuple[int | None, float]:
        """After killing a cell, the holder reports its exit; wait briefly for that."""
        assert self.sock is not None
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.sock], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            msg, sender = self._recv()
            if msg is None:
                continue
            if msg.get("event") == "eof":
                break
            if msg.get("event") == "died" and msg.get("seq") == seq and sender == self.pid:
                return _died_report(msg)
        return None, 0.0


def _died_report(msg: dict) -> tuple[int | None, float]:
    status, cpu = msg.get("status"), msg.get("cpu")
    return (status if isinstance(status, int) else None), (
        float(cpu) if isinstance(cpu, (int, float)) else 0.0
    )


def holder_loop(sock: socket.socket) -> None:
    """Runs in a session's state-holding process; a successful cell's child continues it."""
    namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
    send = sock.send  # bound before any user code runs
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 65536, 4)
        except InterruptedError:
            continue
        if not data:
            os._exit(0)  # the supervisor is gone
        try:
            msg = json.loads(data)
        except ValueError:
            msg = {}
        if msg.get("op") != "cell" or len(fds) != 4:
            for fd in fds:
                os.close(fd)
            continue
        seq = msg.get("seq")
        code_fd = fds.pop()
        with os.fdopen(code_fd, "rb") as f:
            code = f.read().decode("utf-8", errors="replace")
        pid = os.fork()
        if pid == 0:
            rc = INTERNAL_ERROR_EXIT
            try:
                os.setsid()
                for target, fd in zip((0, 1, 2), fds, strict=False):
                    os.dup2(fd, target)
                    os.close(fd)
                _, hard = resource.getrlimit(resource.RLIMIT_CPU)
                soft = int(msg.get("cpu", 10))
                if hard != resource.RLIM_INFINITY:
                    soft = min(soft, hard)
                resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
                _install_std_streams()
                me = os.getpid()
                rc = run_user_code(
                    code,
                    namespace,
                    str(msg.get("filename", "<cell>")),
                    bool(msg.get("show_last", True)),
                )
                if os.getpid() != me:
                    os._exit(rc)
                if LAST_UNCAUGHT is not None and issubclass(LAST_UNCAUGHT, MemoryError):
                    # A cell that ran out of memory is discarded like a killed one: the
                    # earlier state is kept (and this process is near its address-space cap).
                    _flush_std_streams()
                    os._exit(rc)
                _flush_std_streams()
                # This process now holds the newest state: detach from the cell's pipes.
                null = os.open(os.devnull, os.O_RDWR)
                for target in (0, 1, 2):
                    os.dup2(null, target)
                os.close(null)
                send(json.dumps({"event": "done", "seq": seq, "rc": rc}).encode())
            except BaseException:
                os._exit(rc)
            continue
        for fd in fds:
            os.close(fd)
        try:
            send(json.dumps({"event": "started", "seq": seq, "pid": pid}).encode())
        except OSError:
            os._exit(0)
        status, cpu = None, 0.0
        while True:
            try:
                _, status, usage = os.wait4(pid, 0)
                cpu = usage.ru_utime + usage.ru_stime
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                break
        try:
            send(json.dumps({"event": "died", "seq": seq, "status": status, "cpu": cpu}).encode())
        except OSError:
            os._exit(0)


def _internal_failure() -> None:
    """Our own bug in a child: say so on its stderr (the cell's pipe) before exiting."""
    with contextlib.suppress(BaseException):
        os.write(2, ("sandbox internal error:\n" + traceback.format_exc()).encode(errors="replace"))


def main() -> None:
    # The protocol lives on high, close-on-exec descriptors; 0/1 become /dev/null so a stray
    # print in the supervisor can never corrupt a frame. stderr (2) stays for diagnostics.
    proto_in = fcntl_dup(0)
    proto_out = fcntl_dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    config = read_frame(proto_in)
    if config is None:
        sys.exit(2)
    _set_name(SUPERVISOR_NAME)
    supervisor = Supervisor(proto_in, proto_out, config)
    supervisor.setup()
    supervisor.serve()


def fcntl_dup(fd: int) -> int:
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)


if __name__ in ("__main__", "agentenvs_supervisor"):
    main()
