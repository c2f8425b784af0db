"""Issue #40's hostile programs: one per class, each probing the whole class at once.

Each prints what it managed to change or reach (``changed [...]``, ``reached [...]``)
and is expected to print an empty list: every attempt must fail. With the defence
removed, the attempt succeeds and the list names it (shown for each class when the
defence went in: see the issue's report). Run on every backend of the escape suite
(``test_sandbox_escape.py``); the device-node program also through the server
(``tests/sandbox/server/test_sandbox_server_hostile.py``).
"""

from __future__ import annotations

from agentenvs.sandbox import ExecResult
from support.sandbox_escape.programs import OK, Context, FamilyProgram, Program


def _changed_nothing(result: ExecResult, ctx: Context) -> None:
    assert result.stdout == "tried True changed []\n", result


# --- class 1: no run changes an inode of the host (every node under /dev, by every call)
TOUCH_EVERY_DEVICE_NODE = (
    "import os, stat\n"
    "changed, tried = [], 0\n"
    "own = ('/dev/shm', '/dev/mqueue')  # the run's own scratch dirs\n"
    "for root, dirs, files in os.walk('/dev'):\n"
    "    dirs[:] = [d for d in dirs if os.path.join(root, d) not in own]\n"
    "    for name in [*files, *dirs]:\n"
    "        path = os.path.join(root, name)\n"
    "        st = os.lstat(path)\n"
    "        if stat.S_ISLNK(st.st_mode) or path in own:\n"
    "            continue\n"
    "        tried += 1\n"
    "        for what, call in (\n"
    "            ('utime-now', lambda: os.utime(path)),\n"
    "            ('utime-set', lambda: os.utime(path, (0, 0))),\n"
    "            ('chmod', lambda: os.chmod(path, stat.S_IMODE(st.st_mode))),\n"
    "            ('chown', lambda: os.chown(path, st.st_uid, st.st_gid)),\n"
    "            ('setxattr', lambda: os.setxattr(path, 'user.agentenvs', b'1')),\n"
    "        ):\n"
    "            try:\n"
    "                call()\n"
    "                changed.append(f'{what} {path}')\n"
    "            except OSError:\n"
    "                pass\n"
    "print('tried', tried > 5, 'changed', changed)"
)
DEVICE_PROGRAMS = [
    Program("touch_every_device_node", TOUCH_EVERY_DEVICE_NODE, {OK}, _changed_nothing),
]

# --- class 2: the read-only stage holds for every call, whatever the libraries name
_FAMILY_FILE = (
    "import os\n"
    "with open('family.txt', 'w') as f:\n"
    "    f.write('parent')\n"
    "os.mkdir('family.d')\n"
    "def inode(path):\n"
    "    st = os.stat(path)\n"
    "    return (st.st_mode, st.st_uid, st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns,\n"
    "            os.listxattr(path))\n"
    "family_before = [inode('family.txt'), inode('family.d')]\n"
    "print('written')"
)
_METADATA_BY_NUMBER = (
    "import ctypes, os, signal, struct\n"
    "signal.signal(signal.SIGIO, signal.SIG_IGN)  # what F_NOTIFY would send on a read\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.syscall.restype = ctypes.c_long\n"
    "L = ctypes.c_long\n"
    "AT_FDCWD, HIGH = -100, 1 << 32\n"
    "fd = os.open('family.txt', os.O_RDONLY)\n"
    "dfd = os.open('family.d', os.O_RDONLY | os.O_DIRECTORY)\n"
    "path, name = b'family.txt', b'user.channel'\n"
    "value = ctypes.create_string_buffer(b'1')\n"
    "xattr_args = ctypes.create_string_buffer(struct.pack('=QII', ctypes.addressof(value), 1, 0))\n"
    "file_attr = ctypes.create_string_buffer(struct.pack('=5I', 0x40, 0, 0, 0, 0))  # NOATIME\n"
    "flock = ctypes.create_string_buffer(struct.pack('=hhqqi', 0, 0, 0, 0, 0))  # F_RDLCK\n"
    "hint = ctypes.c_uint64(2)  # RWH_WRITE_LIFE_SHORT\n"
    "flags = ctypes.c_int(0x80)  # FS_NOATIME_FL\n"
    "calls = {\n"
    "    'fcntl F_SETLK (high bits)': (72, fd, 6 | HIGH, ctypes.addressof(flock)),\n"
    "    'fcntl F_OFD_SETLK (high bits)': (72, fd, 37 | HIGH, ctypes.addressof(flock)),\n"
    "    'fcntl F_SETLEASE (high bits)': (72, fd, 1024 | HIGH, 0),\n"
    "    'fcntl F_NOTIFY (high bits)': (72, dfd, 1026 | HIGH, 1),\n"
    "    'fcntl F_SET_RW_HINT': (72, fd, 1036, ctypes.addressof(hint)),\n"
    "    'fcntl F_SET_RW_HINT (high bits)': (72, fd, 1036 | HIGH, ctypes.addressof(hint)),\n"
    "    'ioctl FS_IOC_SETFLAGS (high bits)': (16, fd, 0x40086602 | HIGH, ctypes.addressof(flags)),\n"
    "    'setxattrat': (463, AT_FDCWD, path, 0, name, xattr_args, 16),\n"
    "    'removexattrat': (466, AT_FDCWD, path, 0, name),\n"
    "    'file_setattr': (469, AT_FDCWD, path, file_attr, 20, 0),\n"
    "    'fchmodat2': (452, AT_FDCWD, path, 0o600, 0),\n"
    "    'utimensat': (280, AT_FDCWD, path, 0, 0),\n"
    "}\n"
    "changed = []\n"
    "for what, (number, *args) in calls.items():\n"
    "    args = [a if isinstance(a, (bytes, ctypes.Array)) else L(a) for a in args]\n"
    "    if libc.syscall(L(number), *args) == 0:\n"
    "        changed.append(what)\n"
    "with open('family.txt') as f:  # a read: must not change the access time\n"
    "    f.read()\n"
    "os.listdir('family.d')\n"
    "print('changed', changed)"
)
FAMILY_METADATA = FamilyProgram(
    "fork_branch_changes_metadata_by_number_and_high_bits",
    before=[(_FAMILY_FILE, {OK}, "written\n")],
    branch=[(_METADATA_BY_NUMBER, {OK}, "changed []\n")],
    after=[("print([inode('family.txt'), inode('family.d')] == family_before)", {OK}, "True\n")],
)

# --- class 3: branches neither talk nor watch, in either direction
_BRANCH_LISTENS = (
    "import ctypes, os, socket\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.prctl(15, b'agentenvs-beacon', 0, 0, 0)  # PR_SET_NAME, read in /proc/*/comm\n"
    "made = []\n"
    "def attempt(what, make):\n"
    "    try:\n"
    "        made.append((what, make()))\n"
    "    except OSError:\n"
    "        pass\n"
    "def listener(name):\n"
    "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "    s.bind(name)\n"
    "    s.listen(8)\n"
    "    s.setblocking(False)\n"
    "    return s\n"
    "def mailbox(name):\n"
    "    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
    "    s.bind(name)\n"
    "    s.setblocking(False)\n"
    "    return s\n"
    "def watcher():\n"
    "    fd = libc.inotify_init1(os.O_NONBLOCK)\n"
    "    if fd < 0 or libc.inotify_add_watch(fd, b'.', 0xFFF) < 0:\n"
    "        raise OSError(ctypes.get_errno(), 'inotify')\n"
    "    return fd\n"
    "attempt('listen', lambda: listener(b'\\0agentenvs-branch'))\n"
    "attempt('mailbox', lambda: mailbox(b'\\0agentenvs-branch-dgram'))\n"
    "attempt('inotify', watcher)\n"
    "print('ready')"
)
_REACH_THE_OTHER_SIDE = (
    "import os, socket\n"
    "other = b'OTHER'\n"
    "reached = []\n"
    "for pid in range(2, 1024):\n"
    "    if pid in (os.getpid(), os.getppid()):\n"
    "        continue\n"
    "    try:\n"
    "        with open(f'/proc/{pid}/comm') as f:\n"
    "            reached.append(f'sees {pid}: {f.read().strip()}')\n"
    "    except OSError:\n"
    "        pass\n"
    "for name in (b'\\0agentenvs-' + other,):\n"
    "    try:\n"
    "        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "        s.connect(name)\n"
    "        s.send(b'hello')\n"
    "        reached.append(f'connected {name[1:].decode()}')\n"
    "    except OSError:\n"
    "        pass\n"
    "for name in (b'\\0agentenvs-' + other + b'-dgram',):\n"
    "    try:\n"
    "        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b'hello', name)\n"
    "        reached.append(f'sent to {name[1:].decode()}')\n"
    "    except OSError:\n"
    "        pass\n"
    "open('family.txt').read()  # a read the other side must not see\n"
)
_REACHED = "print('reached', reached)"
_HEARD_NOTHING = (
    "import os\n"
    "heard = []\n"
    "for what, obj in made:\n"
    "    try:\n"
    "        if what == 'listen':\n"
    "            obj.accept()\n"
    "        elif what == 'mailbox':\n"
    "            obj.recv(64)\n"
    "        else:\n"
    "            os.read(obj, 4096)\n"
    "        heard.append(what)\n"
    "    except (BlockingIOError, OSError):\n"
    "        pass\n"
    "print('heard', heard, 'watching', [w for w, _ in made if w == 'inotify'])"
)
FAMILY_TALK = FamilyProgram(
    "fork_branches_talk_and_watch_both_ways",
    before=[("with open('family.txt', 'w') as f:\n    f.write('x')", {OK}, "")],
    branch=[(_BRANCH_LISTENS, {OK}, "ready\n")],
    after=[
        (_REACH_THE_OTHER_SIDE.replace("OTHER", "branch") + _REACHED, {OK}, "reached []\n"),
        (_BRANCH_LISTENS.replace("-branch", "-parent"), {OK}, "ready\n"),
    ],
    branch_after=[
        (_REACH_THE_OTHER_SIDE.replace("OTHER", "parent") + _REACHED, {OK}, "reached []\n"),
        (_HEARD_NOTHING, {OK}, "heard [] watching []\n"),
    ],
)

# --- class 4: a parked holder runs nothing, resumed by whoever
_RECORD_WHEN_RUN = (
    "import sys, time\n"
    "stamps = []\n"
    "forking = sys.modules['agentenvs_supervisor.forking']\n"
    "real_report = forking._report\n"
    "def report_then_spin(sock, message):\n"
    "    real_report(sock, message)  # the supervisor has its answer: the request is over\n"
    "    start = time.monotonic()\n"
    "    while time.monotonic() - start < 1.0:\n"
    "        stamps.append(time.monotonic())\n"
    "        sum(range(1000))\n"
    "forking._report = report_then_spin\n"
    "import os\n"
    "keep_open = os.pipe()  # a pipe would stay shared: the supervisor refuses the fork\n"
    "print('armed')"
)
_IDLE_STAMPS = (  # the request that armed it has ended (its holder parked) 0.3 s in
    "idle = [t for t in stamps if stamps[0] + 0.3 < t < stamps[0] + 1.2]\n"
    "print('ran while idle' if idle else 'stopped while idle')"
)
FAMILY_REFUSED = FamilyProgram(
    "fork_refused_parent_stays_parked",
    before=[("x = 1", {OK}, None), (_RECORD_WHEN_RUN, {OK}, "armed\n")],
    branch=[("print(x)", {OK}, "1\n")],
    after=[(_IDLE_STAMPS, {OK}, "stopped while idle\n"), ("print(x)", {OK}, "1\n")],
    forked_by="replay",
    idle_before={"after": 1.5},
)
_HIJACK_IDLE_LOOP = (
    "import socket, time\n"
    "stamps = []\n"
    "real_recv = socket.recv_fds\n"
    "def spin_then_recv(*args, **kwargs):\n"
    "    if not stamps:\n"
    "        start = time.monotonic()\n"
    "        while time.monotonic() - start < 1.0:\n"
    "            stamps.append(time.monotonic())\n"
    "            sum(range(1000))\n"
    "    return real_recv(*args, **kwargs)\n"
    "socket.recv_fds = spin_then_recv\n"
    "armed_at = time.monotonic()\n"
    "print('armed')"
)
_CONTINUE_EVERYONE = (
    "import os, signal, time\n"
    "resumed = []\n"
    "for pid in range(2, 1024):\n"
    "    if pid in (os.getpid(), os.getppid()):\n"
    "        continue\n"
    "    try:\n"
    "        os.kill(pid, signal.SIGCONT)\n"
    "        resumed.append(pid)\n"
    "    except OSError:\n"
    "        pass\n"
    "print('resumed', resumed)"
)
FAMILY_RESUMED = FamilyProgram(
    "fork_parent_resumes_the_parked_branch",
    before=[("x = 1", {OK}, None)],
    branch=[(_HIJACK_IDLE_LOOP, {OK}, "armed\n")],
    after=[(_CONTINUE_EVERYONE, {OK}, "resumed []\n")],
    branch_after=[
        (_IDLE_STAMPS.replace("stamps[0]", "armed_at"), {OK}, "stopped while idle\n"),
        ("print(x)", {OK}, "1\n"),
    ],
    idle_before={"after": 0.4, "branch_after": 1.3},
)

# --- class 5: one branch's memory does not kill another, nor is it blamed on one
_KEEP_MEMORY = (
    "hog = bytearray(240 * 1024 * 1024)  # each within its own limit (256 MB), not together\n"
    "hog[::4096] = b'\\1' * len(hog[::4096])\n"
    "print('kept', len(hog) >> 20)"
)
FAMILY_MEMORY = FamilyProgram(
    "fork_branch_memory_leaves_the_parent_alone",
    before=[("x = 1", {OK}, None)],
    branch=[(_KEEP_MEMORY, {OK}, "kept 240\n")],
    after=[(_KEEP_MEMORY.replace("hog", "mine"), {OK}, "kept 240\n"), ("print(x)", {OK}, "1\n")],
    branch_after=[("print(len(hog) >> 20, x)", {OK}, "240 1\n")],
    timeout=10.0,  # touching 240 MB takes seconds on a loaded machine
)

FAIL_CLOSED_FAMILIES = [
    FAMILY_METADATA,
    FAMILY_TALK,
    FAMILY_REFUSED,
    FAMILY_RESUMED,
    FAMILY_MEMORY,
]
