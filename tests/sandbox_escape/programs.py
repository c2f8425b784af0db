"""The adversarial programs of the escape suite, each with its expected outcome.

Placeholders in the code are filled per run: ``@CANARY_PATH@`` (a file in the host's
/tmp holding ``@CANARY_SECRET@``), ``@ENV_SECRET@`` (a variable in the host process's
environment) and ``@PORT@`` (a TCP listener on the host's 127.0.0.1). ``check`` gets
the result and the filled-in context and asserts what must (not) be in it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class SessionProgram:
    """Cells of one session: (code, expected statuses, expected stdout or None)."""

    name: str
    cells: list[tuple[str, set[str], str | None]] = field(default_factory=list)


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
