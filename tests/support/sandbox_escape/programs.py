"""The adversarial programs of the escape suite, each with its expected outcome.

Placeholders in the code are filled per run: ``@CANARY_PATH@`` (a file in the host's
/tmp holding ``@CANARY_SECRET@``), ``@ENV_SECRET@`` (a variable in the host process's
environment) and ``@PORT@`` (a TCP listener on the host's 127.0.0.1). ``check`` gets
the result and the filled-in context and asserts what must (not) be in it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenvs.sandbox import ExecResult

OK, ERROR, TIMEOUT, MEMORY, OUTPUT, SANDBOX_ERROR = (
    "ok",
    "error",
    "timeout",
    "memory",
    "output_limit",
    "sandbox_error",
)


@dataclass(frozen=True)
class Context:
    canary_path: str
    canary_secret: str
    env_secret: str
    port: int
    max_output_bytes: int
    connections_accepted: Callable[[], int] = lambda: 0
    """How many connections the host listener on ``port`` has accepted so far."""
    processes_before: set[int] = field(default_factory=set)
    """Host processes alive before the current program ran (other suites' long-lived
    workers, say): they cannot be its leftovers."""

    def fill(self, code: str) -> str:
        return (
            code.replace("@CANARY_PATH@", self.canary_path)
            .replace("@CANARY_SECRET@", self.canary_secret)
            .replace("@ENV_SECRET@", self.env_secret)
            .replace("@PORT@", str(self.port))
        )


Check = Callable[[ExecResult, Context], None]


@dataclass(frozen=True)
class Program:
    name: str
    code: str
    expect: set[str]
    check: Check | None = None
    followup: tuple[str, str] | None = None
    """(code, expected stdout) of the next execution, run right after this one."""
    timeout: float | None = None
    """Wall seconds for this program, when the suite's default is too short for its outcome."""
    host_check: Callable[[Any], None] | None = None
    """Looks at the sandbox from the host after the program (gets the started sandbox)."""


@dataclass(frozen=True)
class SessionProgram:
    """Cells of one session: (code, expected statuses, expected stdout or None)."""

    name: str
    cells: list[tuple[str, set[str], str | None]] = field(default_factory=list)
    idle_before: dict[int, float] = field(default_factory=dict)
    """Cell index -> seconds the session stays idle before that cell is sent."""


def _stdout_has(text: str) -> Check:
    def check(result: ExecResult, ctx: Context) -> None:
        assert text in result.stdout, result

    return check


def _stderr_has(text: str) -> Check:
    def check(result: ExecResult, ctx: Context) -> None:
        assert text in result.stderr, result

    return check


def _flooded(stream: str) -> Check:
    def check(result: ExecResult, ctx: Context) -> None:
        assert getattr(result, f"{stream}_truncated"), result.message
        assert (
            len(getattr(result, stream).encode()) <= ctx.max_output_bytes * 3
        )  # replacement chars
        assert len(getattr(result, stream)) > 0

    return check


def _no_canary(result: ExecResult, ctx: Context) -> None:
    assert ctx.canary_secret not in result.stdout + result.stderr
    assert ctx.canary_path.rsplit("/", 1)[1] not in result.stdout


def _no_host_passwd(result: ExecResult, ctx: Context) -> None:
    assert "root:x:0:0" not in result.stdout
    assert "sandbox" in result.stdout  # the synthetic file


def _non_utf8(result: ExecResult, ctx: Context) -> None:
    assert "\ufffd" in result.stdout
    result.stdout.encode("utf-8")  # valid text


def _non_utf8_flood(result: ExecResult, ctx: Context) -> None:
    _flooded("stdout")(result, ctx)
    _non_utf8(result, ctx)


def _no_env_secret(result: ExecResult, ctx: Context) -> None:
    assert ctx.env_secret not in result.stdout + result.stderr
    assert "AGENTENVS_ESCAPE_SECRET" not in result.stdout


PROGRAMS: list[Program] = [
    Program("infinite_loop", "while True:\n    pass", {TIMEOUT}),
    Program(
        "loop_ignoring_sigxcpu",
        "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass",
        {TIMEOUT},
    ),
    Program("long_sleep", "import time\ntime.sleep(3600)", {TIMEOUT}),
    Program(
        "fork_bomb",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        {TIMEOUT, ERROR},
    ),
    Program(
        "setsid_double_fork_daemon",
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        while True:\n"
        "            time.sleep(0.05)\n"
        "    os._exit(0)\n"
        "time.sleep(0.2)\n"
        "print('parent done')",
        {OK},
        _stdout_has("parent done"),
    ),
    Program(
        "thread_bomb",
        "import threading, time\n"
        "threads = []\n"
        "while True:\n"
        "    t = threading.Thread(target=time.sleep, args=(3600,), daemon=True)\n"
        "    t.start()\n"
        "    threads.append(t)",
        {ERROR, MEMORY, TIMEOUT},
    ),
    Program("huge_allocation", "x = bytearray(64 * 1024**3)", {MEMORY}),
    Program(
        "huge_allocation_numpy",
        "import numpy as np\nx = np.ones((1 << 33,), dtype=np.uint8)",
        {MEMORY},
    ),
    Program(
        "many_children_each_allocating",
        "import os, time\n"
        "pids = []\n"
        "for i in range(8):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        try:\n"
        "            block = b'\\x01' * (200 * 1024 * 1024)\n"
        "            time.sleep(1)\n"
        "        finally:\n"
        "            os._exit(0)\n"
        "    pids.append(pid)\n"
        "for pid in pids:\n"
        "    os.waitpid(pid, 0)\n"
        "print('parent survived')",
        {MEMORY},
        # the kernel reclaims before each OOM kill: 8 kills take a few seconds
        timeout=20.0,
    ),
    Program(
        "deep_recursion",
        "def f(n):\n    return f(n + 1)\nf(0)",
        {ERROR},
        _stderr_has("RecursionError"),
    ),
    Program(
        "deep_recursion_unbounded",
        "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1)\nf(0)",
        # Python 3.11 keeps Python frames off the C stack: this runs until memory or time ends
        {ERROR, MEMORY, TIMEOUT},
    ),
    Program("print_flood", "while True:\n    print('flood ' * 10)", {OUTPUT}, _flooded("stdout")),
    Program("one_huge_print", "print('x' * (50 * 1024 * 1024))", {OUTPUT}, _flooded("stdout")),
    Program(
        "stderr_flood",
        "import sys\nwhile True:\n    sys.stderr.write('e' * 1000 + '\\n')",
        {OUTPUT},
        _flooded("stderr"),
    ),
    Program(
        "non_utf8_bytes",
        "import sys\nsys.stdout.buffer.write(b'ok \\xff\\xfe\\xc3 bytes\\n')",
        {OK},
        _non_utf8,
    ),
    Program(
        "non_utf8_byte_flood",
        "import sys\nwhile True:\n    sys.stdout.buffer.write(bytes(range(128, 256)))",
        {OUTPUT},
        _non_utf8_flood,
    ),
    Program(
        "huge_file",
        "with open('big.bin', 'wb') as f:\n    while True:\n        f.write(b'\\0' * 1024 * 1024)",
        {ERROR},
        followup=("import os\nprint(sorted(os.listdir('.')))", "[]"),
    ),
    Program(
        "fill_the_work_dir",
        "i = 0\n"
        "while True:\n"
        "    with open(f'fill{i}.bin', 'wb') as f:\n"
        "        f.write(b'\\0' * (4 * 1024 * 1024))\n"
        "    i += 1",
        {ERROR},
        followup=("import os\nprint(sorted(os.listdir('.')))", "[]"),
    ),
    Program(
        "tcp_connect_host_loopback",
        "import socket\nsocket.create_connection(('127.0.0.1', @PORT@), timeout=1)",
        {ERROR},
    ),
    Program(
        "tcp_connect_internet",
        "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)",
        {ERROR},
    ),
    Program(
        "udp_send",
        "import socket\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "s.sendto(b'x', ('8.8.8.8', 53))",
        {ERROR},
    ),
    Program("dns_lookup", "import socket\nprint(socket.getaddrinfo('example.com', 80))", {ERROR}),
    Program("read_etc_passwd", "print(open('/etc/passwd').read())", {OK}, _no_host_passwd),
    Program("read_root_home", "import os\nprint(os.listdir('/root'))", {ERROR}),
    Program(
        "read_host_tmp",
        "import os\nprint(os.listdir('/tmp'))\nprint(open('@CANARY_PATH@').read())",
        {ERROR},
        _no_canary,
    ),
    Program(
        "read_parent_environment",
        "import os\n"
        "print(dict(os.environ))\n"
        "for path in ('/proc/1/environ', '/proc/self/environ', f'/proc/{os.getppid()}/environ'):\n"
        "    try:\n"
        "        print(path, open(path, 'rb').read())\n"
        "    except OSError as exc:\n"
        "        print(path, type(exc).__name__)",
        {OK},
        _no_env_secret,
    ),
    Program(
        "write_system_dirs",
        "written = []\n"
        "for d in ('/', '/usr', '/usr/lib', '/etc', '/bin', '/lib', '/proc', '/dev', '/sys', '/var'):\n"
        "    try:\n"
        "        with open(d.rstrip('/') + '/escape-test', 'w') as f:\n"
        "            f.write('x')\n"
        "        written.append(d)\n"
        "    except OSError:\n"
        "        pass\n"
        "assert not written, written\n"
        "print('all refused')",
        {OK},
        _stdout_has("all refused"),
    ),
    Program(
        "symlink_out_of_work_dir",
        "import os\n"
        "os.symlink('@CANARY_PATH@', 'to-canary')\n"
        "os.symlink('/etc/shadow', 'to-shadow')\n"
        "os.symlink('/proc/1/root/etc/passwd', 'to-supervisor-root')\n"
        "for name in ('to-canary', 'to-shadow', 'to-supervisor-root'):\n"
        "    try:\n"
        "        print(name, open(name).read())\n"
        "    except OSError as exc:\n"
        "        print(name, type(exc).__name__)",
        {OK},
        _no_canary,
    ),
    Program(
        "kill_the_parent",
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('still here')",
        {OK, ERROR},
    ),
    Program(
        "kill_minus_one",
        "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('still here')",
        {OK, ERROR},
    ),
    Program("kill_process_group", "import os, signal\nos.killpg(0, signal.SIGKILL)", {ERROR}),
    Program(
        "ptrace_the_parent",
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206\n"
        "results = [libc.ptrace(op, os.getppid(), 0, 0) for op in (PTRACE_ATTACH, PTRACE_SEIZE)]\n"
        "print(results, ctypes.get_errno())\n"
        "assert results == [-1, -1], results",
        {OK},
    ),
    Program(
        "open_parent_mem_and_environ",
        "import os\n"
        "results = {}\n"
        "for pid in sorted({os.getppid(), 1}):\n"
        "    for name in ('mem', 'environ', 'maps'):\n"
        "        path = f'/proc/{pid}/{name}'\n"
        "        try:\n"
        "            with open(path, 'rb') as f:\n"
        "                f.read(16)\n"
        "            results[path] = 'read'\n"
        "        except OSError as exc:\n"
        "            results[path] = type(exc).__name__\n"
        "print(results)\n"
        "assert 'read' not in results.values(), results",
        {OK},
        _no_env_secret,
    ),
    Program(
        "unshare_mount_io_uring",
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.syscall.restype = ctypes.c_long\n"
        "params = ctypes.create_string_buffer(120)\n"
        "results = {\n"
        "    'unshare_user': libc.unshare(0x10000000),\n"
        "    'unshare_net': libc.unshare(0x40000000),\n"
        "    'unshare_mount': libc.unshare(0x00020000),\n"
        "    'mount_tmpfs': libc.mount(b'none', b'/tmp', b'tmpfs', 0, None),\n"
        "    'io_uring_setup': libc.syscall(425, 4, params),\n"
        "}\n"
        "print(results)\n"
        "assert all(v == -1 for v in results.values()), results",
        {OK},
    ),
    Program(
        "raise_rlimits",
        "import resource\n"
        "results = {}\n"
        "for name in ('RLIMIT_NPROC', 'RLIMIT_AS', 'RLIMIT_CPU', 'RLIMIT_FSIZE', 'RLIMIT_NOFILE', 'RLIMIT_CORE'):\n"
        "    kind = getattr(resource, name)\n"
        "    try:\n"
        "        resource.setrlimit(kind, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n"
        "        results[name] = 'raised'\n"
        "    except (ValueError, OSError) as exc:\n"
        "        results[name] = type(exc).__name__\n"
        "print(results)\n"
        "assert 'raised' not in results.values(), results",
        {OK},
    ),
    Program(
        "write_inherited_fds",
        "import os\n"
        "written = []\n"
        "for fd in range(3, 1024):\n"
        "    try:\n"
        "        os.write(fd, b'\\x00\\x00\\x00\\x10{\"garbage\": 1}')\n"
        "        written.append(fd)\n"
        "    except OSError:\n"
        "        pass\n"
        "print('written', written)",
        {OK},
        _stdout_has("written []"),
    ),
]

CONCURRENT_WRITER = (
    "import os, time\n"
    "with open('secret-of-a.txt', 'w') as f:\n"
    "    f.write('@CANARY_SECRET@-A')\n"
    "time.sleep(1.5)\n"
    "print('a done')"
)
CONCURRENT_READER = (
    "import os, glob\n"
    "found = []\n"
    "for root in ('.', '/tmp', '/dev/shm', '/var', '/run'):\n"
    "    for path in glob.glob(root + '/**/secret-of-a.txt', recursive=True):\n"
    "        found.append(path)\n"
    "for pid in os.listdir('/proc'):\n"
    "    if pid.isdigit():\n"
    "        try:\n"
    "            found += [pid] if 'secret-of-a.txt' in os.listdir(f'/proc/{pid}/cwd') else []\n"
    "        except OSError:\n"
    "            pass\n"
    "print('found', found)"
)

SESSION_PROGRAMS: list[SessionProgram] = [
    SessionProgram(
        "session_cell_kills_the_supervisor",
        [
            ("x = 42", {OK}, None),
            (
                "import os, signal\n"
                "for pid in (1, os.getppid()):\n"
                "    try:\n"
                "        os.kill(pid, signal.SIGKILL)\n"
                "    except OSError as exc:\n"
                "        print(pid, exc)\n"
                "os.kill(-1, signal.SIGKILL)\n"
                "os._exit(1)",
                {ERROR, SANDBOX_ERROR},
                None,
            ),
            ("x", {OK}, "42\n"),
        ],
    ),
    SessionProgram(
        "session_cell_fork_bombs",
        [
            ("x = 7", {OK}, None),
            (
                "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
                {TIMEOUT, ERROR},
                None,
            ),
            ("x * 6", {OK}, "42\n"),
        ],
    ),
]

# --- Issue 11, class 1: cleanup that a program can crash (each followed by an innocent run)
EMPTY_WORK_DIR = ("import os\nprint(sorted(os.listdir('.')))", "[]")
CLEANUP_PROGRAMS: list[Program] = [
    Program(
        "dirs_mode_000_and_without_x",
        "import os\n"
        "for name, mode in (('locked', 0), ('no_x', 0o600), ('no_w', 0o500), ('no_r', 0o300)):\n"
        "    os.makedirs(f'{name}/inner/deeper')\n"
        "    open(f'{name}/inner/file', 'w').write('x')\n"
        "    os.chmod(f'{name}/inner', mode)\n"
        "    os.chmod(name, mode)\n"
        "print('left')",
        {OK},
        followup=EMPTY_WORK_DIR,
    ),
    Program(
        "tree_5000_levels_deep",
        "import os\n"
        "top = os.open('.', os.O_RDONLY)\n"
        "for i in range(5000):\n"
        "    os.mkdir('d')\n"
        "    os.chdir('d')\n"
        "open('bottom', 'w').write('x')\n"
        "os.chmod('.', 0)\n"
        "print('deep')",
        {OK},
        followup=EMPTY_WORK_DIR,
        timeout=20.0,
    ),
    Program(
        "two_hundred_thousand_files",
        "import os\n"
        "for i in range(200_000):\n"
        "    os.close(os.open(f'f{i}', os.O_CREAT | os.O_WRONLY, 0o600))\n"
        "print('many')",
        {OK},
        followup=EMPTY_WORK_DIR,
        timeout=60.0,
    ),
    Program(
        "symlink_hardlink_and_root_traps",
        "import os\n"
        "os.symlink('/', 'to-root')\n"
        "os.symlink('loop', 'loop')\n"
        "os.symlink('/usr/lib', 'lib-dir')\n"
        "os.mkdir('real')\n"
        "open('real/a', 'w').write('a')\n"
        "os.link('real/a', 'hard-a')\n"
        "os.symlink('real', 'real-link')\n"
        "os.mkfifo('fifo')\n"
        "for call in (lambda: os.setxattr('.', 'user.secret', b'from-run-a'),\n"
        "             lambda: os.utime('.', (123456789, 123456789)),\n"
        "             lambda: os.chmod('.', 0)):\n"
        "    try:\n"
        "        call()\n"
        "    except OSError:\n"
        "        pass\n"
        "print('trapped')",
        {OK},
        followup=(
            "import os\n"
            "try:\n"
            "    leaked = os.getxattr('.', 'user.secret')\n"
            "except OSError:\n"
            "    leaked = None\n"
            "print(sorted(os.listdir('.')), leaked, int(os.stat('.').st_mtime) != 123456789)",
            "[] None True",
        ),
    ),
]

# --- class 2: state that survives from one run to the next on the same worker
SYSV_IPC_WRITER = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.shmat.restype = ctypes.c_void_p\n"
    "shm = libc.shmget(0x5EC2E7, 4096, 0o1600)\n"
    "assert shm >= 0, ctypes.get_errno()\n"
    "addr = libc.shmat(shm, None, 0)\n"
    "ctypes.memmove(addr, b'@CANARY_SECRET@', len(b'@CANARY_SECRET@'))\n"
    "assert libc.msgget(0x5EC2E8, 0o1600) >= 0\n"
    "assert libc.semget(0x5EC2E9, 1, 0o1600) >= 0\n"
    "print('parked')"
)
SYSV_IPC_READER = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "found = [libc.shmget(0x5EC2E7, 0, 0), libc.msgget(0x5EC2E8, 0), libc.semget(0x5EC2E9, 0, 0)]\n"
    "rows = [len(open(f'/proc/sysvipc/{k}').read().splitlines()) - 1 for k in ('shm', 'msg', 'sem')]\n"
    "print(found, rows)"
)
STATE_PROGRAMS: list[Program] = [
    Program(
        "sysv_ipc_secret_for_the_next_run",
        SYSV_IPC_WRITER,
        {OK},
        followup=(SYSV_IPC_READER, "[-1, -1, -1] [0, 0, 0]"),
    ),
    Program(
        "posix_message_queue",
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "q = libc.mq_open(b'/agentenvs-q', os.O_CREAT | os.O_RDWR, 0o600, None)\n"
        "print('created' if q >= 0 else 'refused')",
        {OK},
        followup=(
            "import ctypes, os\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.mq_open(b'/agentenvs-q', os.O_RDWR, 0, None))",
            "-1",
        ),
    ),
    Program(
        "abstract_socket_daemon",
        "import os, socket, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "    s.bind(b'\\0agentenvs-leftover')\n"
        "    s.listen(1)\n"
        "    while True:\n"
        "        conn, _ = s.accept()\n"
        "        conn.sendall(b'@CANARY_SECRET@')\n"
        "time.sleep(0.3)\n"
        "print('listening')",
        {OK},
        followup=(
            "import socket\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            "try:\n"
            "    s.connect(b'\\0agentenvs-leftover')\n"
            "    print('reached', s.recv(100))\n"
            "except OSError:\n"
            "    print('gone')",
            "gone",
        ),
    ),
    Program(
        "process_state_changes",
        "import os, resource, signal\n"
        "os.umask(0)\n"
        "os.environ['AGENTENVS_LEFTOVER'] = '1'\n"
        "os.putenv('AGENTENVS_LEFTOVER', '1')\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "os.chdir('/')\n"
        "print('changed')",
        {OK},
        followup=(
            "import os, resource, signal\n"
            "print(os.umask(0o022) != 0, 'AGENTENVS_LEFTOVER' in os.environ,\n"
            "      resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 16,\n"
            "      signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, os.getcwd() == os.environ['HOME'])",
            "True False True True True",
        ),
    ),
]

# --- class 3: resource leaks that poison a worker (memory held outside the run's process)
LEAK_PROGRAMS: list[Program] = [
    Program(
        "park_memory_in_sysv_shm",
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        "size = 200 * 1024 * 1024\n"
        "shm = libc.shmget(0, ctypes.c_size_t(size), 0o1600)\n"
        "assert shm >= 0, ctypes.get_errno()\n"
        "addr = libc.shmat(shm, None, 0)\n"
        "ctypes.memset(addr, 1, size)\n"
        "print('parked')",
        {OK},
        followup=(
            "block = bytearray(200 * 1024 * 1024)\nblock[::4096] = b'\\x01' * len(block[::4096])\n"
            "print('allocated')",
            "allocated",
        ),
        timeout=20.0,
    ),
]

HARDENING_PROGRAMS = CLEANUP_PROGRAMS + STATE_PROGRAMS + LEAK_PROGRAMS
PROGRAMS += HARDENING_PROGRAMS

# --- class 4: a session cell must not be able to impersonate the session's state holder
SESSION_PROGRAMS.append(
    SessionProgram(
        "session_helper_forges_done",
        [
            ("x = 1", {OK}, None),
            (
                "import json, os, socket, stat, sys, time\n"
                "seq = int(sys._getframe().f_code.co_filename.strip('<>').split('-')[1])\n"
                "socks = []\n"
                "for fd in range(3, 256):\n"
                "    try:\n"
                "        if stat.S_ISSOCK(os.fstat(fd).st_mode):\n"
                "            socks.append(fd)\n"
                "    except OSError:\n"
                "        pass\n"
                "if os.fork() == 0:\n"
                "    x = 'forged'\n"
                "    for fd in socks:\n"
                "        for event in ('started', 'done'):\n"
                "            try:\n"
                "                s = socket.socket(fileno=os.dup(fd))\n"
                "                s.send(json.dumps({'event': event, 'seq': seq, 'rc': 0, 'pid': os.getpid()}).encode())\n"
                "            except OSError:\n"
                "                pass\n"
                "    time.sleep(5)\n"
                "    os._exit(0)\n"
                "time.sleep(0.5)\n"
                "print('cell done')",
                {OK},
                "cell done\n",
            ),
            ("print(x)", {OK}, "1\n"),
        ],
    )
)

# Shared by the class-4 programs: every descriptor the cell can find (by scanning
# /proc/self/fd), and forged session frames of every shape written to each of them.
_FORGE_ON_EVERY_FD = (
    "import json, os, socket, stat, sys\n"
    "def forge(holder):\n"
    "    frames = []\n"
    "    for seq in range(1, 8):\n"
    "        for event in ('started', 'done', 'died', 'finished', 'successor'):\n"
    "            frames.append({'event': event, 'seq': seq, 'rc': 0, 'pid': holder,\n"
    "                           'holder': holder, 'outcome': 'done', 'status': 0})\n"
    "    sent = 0\n"
    "    for name in os.listdir('/proc/self/fd'):\n"
    "        fd = int(name)\n"
    "        try:\n"
    "            mode = os.fstat(fd).st_mode\n"
    "        except OSError:\n"
    "            continue\n"
    "        for frame in frames:\n"
    "            data = json.dumps(frame).encode()\n"
    "            try:\n"
    "                if stat.S_ISSOCK(mode):\n"
    "                    s = socket.socket(fileno=os.dup(fd))\n"
    "                    s.send(data)\n"
    "                    s.detach()\n"
    "                elif fd > 2:\n"
    "                    os.write(fd, len(data).to_bytes(4, 'big') + data)\n"
    "                sent += 1\n"
    "            except OSError:\n"
    "                pass\n"
    "    return sent\n"
)
_HOLDER_TASKS = "import os\nprint(len(os.listdir('/proc/self/task')))"

SESSION_PROGRAMS += [
    SessionProgram(
        # the cell's own process says "done" (on every fd it can find) long before it is:
        # the answer still waits for the cell's code, and the state is the finished cell's
        "session_cell_sends_early_done",
        [
            ("x = 1", {OK}, None),
            (
                _FORGE_ON_EVERY_FD + "import time\n"
                "forge(os.getpid())\n"
                "time.sleep(0.5)\n"
                "x = 'late'\n"
                "print('finished')",
                {OK},
                "finished\n",
            ),
            ("print(x)", {OK}, "late\n"),
        ],
    ),
    SessionProgram(
        # a helper the cell forked forges frames on every inherited descriptor and names
        # itself holder; it must never be adopted, and the cell itself completes
        "session_helper_forges_frames_on_every_fd",
        [
            ("x = 1", {OK}, None),
            (
                _FORGE_ON_EVERY_FD + "import time\n"
                "if os.fork() == 0:\n"
                "    x = 'forged'\n"
                "    for _ in range(20):\n"
                "        forge(os.getpid())\n"
                "        time.sleep(0.02)\n"
                "    os._exit(0)\n"
                "time.sleep(0.3)\n"
                "print('cell done')",
                {OK},
                "cell done\n",
            ),
            ("print(x)", {OK}, "1\n"),
            ("import time\ntime.sleep(0.5)\nprint(x)", {OK}, "1\n"),
        ],
    ),
    SessionProgram(
        # threads a cell leaves running do not survive into the holder
        "session_threads_left_behind",
        [
            ("x = 1", {OK}, None),
            (
                _FORGE_ON_EVERY_FD + "import threading, time\n"
                "def meddle():\n"
                "    global x\n"
                "    time.sleep(0.3)\n"
                "    while True:\n"
                "        x = 'forged'\n"
                "        forge(os.getpid())\n"
                "        time.sleep(0.01)\n"
                "for _ in range(3):\n"
                "    threading.Thread(target=meddle, daemon=True).start()\n"
                "print('threads started')",
                {OK},
                "threads started\n",
            ),
            ("import time\ntime.sleep(0.7)\nprint(x)", {OK}, "1\n"),
            (_HOLDER_TASKS, {OK}, "1\n"),
        ],
    ),
    SessionProgram(
        # handlers an earlier cell installed never run in the holder, whatever a later
        # cell sends it; a stopped holder is resumed
        "session_signals_to_the_holder",
        [
            ("x = 1", {OK}, None),
            (
                _FORGE_ON_EVERY_FD + "import signal\n"
                "def handler(*_):\n"
                "    global x\n"
                "    x = 'forged'\n"
                "    forge(os.getpid())\n"
                "for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGHUP,\n"
                "            signal.SIGINT, signal.SIGALRM, signal.SIGPIPE):\n"
                "    signal.signal(sig, handler)\n"
                "print('installed')",
                {OK},
                "installed\n",
            ),
            (
                "import os, signal, time\n"
                "for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGHUP,\n"
                "            signal.SIGINT, signal.SIGALRM, signal.SIGPIPE):\n"
                "    os.kill(os.getppid(), sig)\n"
                "time.sleep(0.3)\n"
                "raise RuntimeError('discard this cell: the holder keeps the state')",
                {ERROR},
                "",
            ),
            ("print(x)", {OK}, "1\n"),
            (
                "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\nprint('stopped it')",
                {OK},
                "stopped it\n",
            ),
            ("print(x)", {OK}, "1\n"),
        ],
    ),
]

# --- issue #24, classes 1 and 2: a program must not change the processes around it
# Every other process it can see (the supervisor that forks the next run; in a forked
# session, the family's other holders) is reniced, put under SCHED_IDLE, pinned to one
# CPU, given the idle I/O class and its hard limits lowered; process-group and uid-wide
# renicing is tried too. Calls on the caller itself keep working (os.nice, setrlimit).
_REACH_OTHER_PROCESSES = (
    "import ctypes, os, resource\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "IOPRIO_SET = {'x86_64': 251, 'aarch64': 30}.get(os.uname().machine)\n"
    "def reach():\n"
    "    me, changed = os.getpid(), []\n"
    "    for pid in range(1, 1024):  # by number: /proc shows no process of another domain\n"
    "        if pid == me:\n"
    "            continue\n"
    "        attempts = {\n"
    "            'nice': lambda: os.setpriority(os.PRIO_PROCESS, pid, 19),\n"
    "            'sched_idle': lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0)),\n"
    "            'sched_param': lambda: os.sched_setparam(pid, os.sched_param(0)),\n"
    "            'affinity': lambda: os.sched_setaffinity(pid, {min(os.sched_getaffinity(0))}),\n"
    "            'nofile': lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, (8, 8)),\n"
    "            'fsize': lambda: resource.prlimit(pid, resource.RLIMIT_FSIZE, (1, 1)),\n"
    "            'stack': lambda: resource.prlimit(pid, resource.RLIMIT_STACK, (65536, 65536)),\n"
    "            'as': lambda: resource.prlimit(pid, resource.RLIMIT_AS, (1 << 26, 1 << 26)),\n"
    "        }\n"
    "        for what, attempt in attempts.items():\n"
    "            try:\n"
    "                attempt()\n"
    "                changed.append(f'{what}:{pid}')\n"
    "            except OSError:\n"
    "                pass\n"
    "        if IOPRIO_SET and libc.syscall(IOPRIO_SET, 1, pid, 3 << 13) == 0:\n"
    "            changed.append(f'ioprio:{pid}')\n"
    "    for which in (os.PRIO_PGRP, os.PRIO_USER):\n"
    "        try:\n"
    "            os.setpriority(which, 0, 19)\n"
    "            changed.append(f'setpriority-which-{which}')\n"
    "        except OSError:\n"
    "            pass\n"
    "    if IOPRIO_SET and libc.syscall(IOPRIO_SET, 3, 0, 3 << 13) == 0:\n"
    "        changed.append('ioprio-uid')\n"
    "    return changed\n"
)
_OWN_ATTRIBUTES_STILL_WORK = (
    "import os, resource\n"
    "os.nice(1)\n"
    "os.sched_setaffinity(0, os.sched_getaffinity(0))\n"
    "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (soft // 2, hard))\n"
    "resource.prlimit(0, resource.RLIMIT_NOFILE, (soft // 2, hard))\n"
    "print('own attributes changed')"
)


def _supervisors_intact(sandbox) -> None:
    """From the host: no process of the pool (supervisors, their idle children) was
    reniced, put under SCHED_IDLE or given lower limits (the sandboxed code cannot look:
    /proc shows it no process outside its own Landlock domain)."""
    for pid in sandbox.host_pids():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            limits = {
                line[:26].strip(): line[26:].split()
                for line in Path(f"/proc/{pid}/limits").read_text().splitlines()
            }
        except OSError:
            continue  # an idle child that took its request meanwhile
        assert int(fields[16]) < 19 and fields[38] == "0", (pid, fields[16], fields[38])
        assert limits["Max open files"][1] != "8" and limits["Max file size"][1] != "1", limits


TENANCY_PROGRAMS: list[Program] = [
    Program(
        "renice_and_prlimit_the_supervisor",
        _REACH_OTHER_PROCESSES + "print('changed', reach())",
        {OK},
        check=_stdout_has("changed []"),
        host_check=_supervisors_intact,
    ),
    Program(
        "own_scheduling_and_limits_still_work",
        _OWN_ATTRIBUTES_STILL_WORK,
        {OK},
        check=_stdout_has("own attributes changed"),
    ),
]
PROGRAMS += TENANCY_PROGRAMS


@dataclass(frozen=True)
class FamilyProgram:
    """A session that forks: cells in the parent, then in the fork, then in the parent
    again (each: code, expected statuses, expected stdout or None)."""

    name: str
    before: list[tuple[str, set[str], str | None]]
    branch: list[tuple[str, set[str], str | None]]
    after: list[tuple[str, set[str], str | None]]
    branch_after: list[tuple[str, set[str], str | None]] = field(default_factory=list)
    """Cells in the fork once the parent's ``after`` cells ran."""
    forked_by: str = "process"
    """How the fork must have been made ("replay": the supervisor must refuse it)."""
    idle_before: dict[str, float] = field(default_factory=dict)
    """Phase ("after", "branch_after") -> seconds the whole family stays idle before it."""
    timeout: float | None = None
    """Wall seconds for each cell, when the suite's default is too short for its work."""


_SNAPSHOT = (
    "import os, resource\n"
    "def snapshot():\n"
    "    return (os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0),\n"
    "            sorted(os.sched_getaffinity(0)),\n"
    "            [resource.getrlimit(r) for r in (resource.RLIMIT_NOFILE, resource.RLIMIT_AS,\n"
    "             resource.RLIMIT_FSIZE, resource.RLIMIT_STACK, resource.RLIMIT_NPROC)])\n"
    "before = snapshot()\n"
    "print('taken')"
)
FAMILY_PROGRAMS: list[FamilyProgram] = [
    FamilyProgram(
        # class 2: a branch reaches for its parent holder (and every other process)
        "fork_branch_renices_and_prlimits_its_parent",
        before=[(_SNAPSHOT, {OK}, "taken\n")],
        branch=[(_REACH_OTHER_PROCESSES + "print('changed', reach())", {OK}, "changed []\n")],
        after=[
            ("print(snapshot() == before)", {OK}, "True\n"),
            ("files = [open('/dev/null') for _ in range(200)]\nprint(len(files))", {OK}, "200\n"),
            ("block = bytearray(64 * 1024 * 1024)\nprint(len(block) >> 20)", {OK}, "64\n"),
        ],
    ),
    FamilyProgram(
        # class 4: a branch's cell leaves its children unreaped (exited ones, and live ones
        # the sweep kills): its holder must not keep them as zombies, or the family's shared
        # process limit leaves the parent's next cell unable to fork
        "fork_branch_leaves_zombies",
        before=[("x = 1", {OK}, None)],
        branch=[
            (
                "import os, time\n"
                "made = 0\n"
                "for i in range(40):\n"
                "    try:\n"
                "        pid = os.fork()\n"
                "    except OSError:\n"
                "        break\n"
                "    if pid == 0:\n"
                "        if i % 2:\n"
                "            time.sleep(60)\n"
                "        os._exit(0)\n"
                "    made += 1\n"
                "time.sleep(0.2)\n"
                "print('forked', made >= 20)",
                {OK},
                "forked True\n",
            ),
            ("print(x)", {OK}, "1\n"),
        ],
        after=[
            (
                "import os\n"
                "kids = []\n"
                "for _ in range(24):\n"
                "    pid = os.fork()\n"
                "    if pid == 0:\n"
                "        import time\n"
                "        time.sleep(0.3)\n"
                "        os._exit(0)\n"
                "    kids.append(pid)\n"
                "for pid in kids:\n"
                "    os.waitpid(pid, 0)\n"
                "print('forked', len(kids))",
                {OK},
                "forked 24\n",
            ),
            ("print(x)", {OK}, "1\n"),
        ],
    ),
]

# class 3: after a fork, a branch changes the metadata of the family's files (Landlock
# covers writes, not modes, times, xattrs or locks; every fork shares one tmpfs): the
# parent's files must keep their modes, times and xattrs, and stay readable to it
_FAMILY_FILES = (
    "import os\n"
    "with open('shared.txt', 'w') as f:\n"
    "    f.write('parent')\n"
    "os.mkdir('d')\n"
    "with open('d/f', 'w') as f:\n"
    "    f.write('x')\n"
    "def meta():\n"
    "    out = []\n"
    "    for path in ('shared.txt', 'd', 'd/f'):\n"
    "        st = os.stat(path)\n"
    "        try:\n"
    "            xattrs = os.listxattr(path)\n"
    "        except OSError:\n"
    "            xattrs = None\n"
    "        out.append((path, st.st_mode, st.st_mtime_ns, st.st_uid, st.st_gid, xattrs))\n"
    "    return out\n"
    "files_before = meta()\n"
    "print('written')"
)
_CHANGE_FAMILY_METADATA = (
    "import fcntl, os\n"
    "changed = []\n"
    "def attempt(what, change):\n"
    "    try:\n"
    "        change()\n"
    "        changed.append(what)\n"
    "    except OSError:\n"
    "        pass\n"
    "fd = os.open('shared.txt', os.O_RDONLY)\n"
    "for path in ('shared.txt', 'd', 'd/f'):\n"
    "    attempt(f'chmod {path}', lambda: os.chmod(path, 0))\n"
    "    attempt(f'utime {path}', lambda: os.utime(path, (0, 0)))\n"
    "    attempt(f'chown {path}', lambda: os.chown(path, os.getuid(), os.getgid()))\n"
    "    attempt(f'setxattr {path}', lambda: os.setxattr(path, 'user.channel', b'1'))\n"
    "attempt('fchmod', lambda: os.fchmod(fd, 0))\n"
    "attempt('futime', lambda: os.utime(fd, (1, 1)))\n"
    "attempt('fsetxattr', lambda: os.setxattr(fd, 'user.channel', b'1'))\n"
    "attempt('flock', lambda: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB))\n"
    "attempt('fcntl lock', lambda: fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB))\n"
    "print('changed', changed)"
)
FAMILY_PROGRAMS.append(
    FamilyProgram(
        "fork_branch_changes_family_file_metadata",
        before=[(_FAMILY_FILES, {OK}, "written\n")],
        branch=[
            (_CHANGE_FAMILY_METADATA, {OK}, "changed []\n"),
            ("print(open('shared.txt').read())", {OK}, "parent\n"),
        ],
        after=[
            ("print(meta() == files_before)", {OK}, "True\n"),
            (
                "print(open('shared.txt').read(), open('d/f').read(), os.listdir('d'))",
                {OK},
                "parent x ['f']\n",
            ),
        ],
    )
)

# class 5: a cell rebinds what the holder's own loop calls between requests
# (``socket.recv_fds``): the rebound function must not run while the session is idle.
# Its first call records time stamps in a busy loop for a second (without the defence:
# right after the cell ends); none may fall in the idle second and a half that follows.
SESSION_PROGRAMS.append(
    SessionProgram(
        "session_code_runs_in_the_idle_holder",
        [
            ("x = 1", {OK}, None),
            (
                "import socket, time\n"
                "stamps = []\n"
                "def spin_then(real):\n"
                "    def hijacked(*args, **kwargs):\n"
                "        if not stamps:  # only the first call spins\n"
                "            start = time.monotonic()\n"
                "            while time.monotonic() - start < 1.0:\n"
                "                stamps.append(time.monotonic())\n"
                "                sum(range(1000))\n"
                "            stamps.append(time.monotonic())  # when it got to go on\n"
                "        return real(*args, **kwargs)\n"
                "    return hijacked\n"
                "socket.recv_fds = spin_then(socket.recv_fds)\n"
                "armed_at = time.monotonic()\n"
                "print('armed')",
                {OK},
                "armed\n",
            ),
            (
                "idle = [t for t in stamps if armed_at + 0.3 < t < armed_at + 1.4]\n"
                "print('ran while idle' if idle else 'stopped while idle')",
                {OK},
                "stopped while idle\n",
            ),
            ("print(x)", {OK}, "1\n"),
        ],
        idle_before={2: 1.5},
    )
)
