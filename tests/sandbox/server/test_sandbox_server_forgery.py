"""A program must not be able to forge the files its own response returns (issue #11, class 7).

Each program writes ``out.txt`` = ``real`` and then tries to make the answer say
something else: it reads the wrapper around it (its own source, for the marker that
delimits fetched files) and prints a forged block, patches ``sys.stderr`` so the real block
is rewritten, registers an ``atexit`` hook, or prints blind guesses of the marker. The
answer's ``files`` must hold what is on disk and nothing more.

The wrapper this server used before (the fetch code inside the program, the files after a
random marker on stderr) was forged by the first two; the sandbox now reads the files
outside the program's process (``ExecResult.files``).
"""

from __future__ import annotations

import base64

import pytest
from support.sandbox_server_helpers import ServerProcess, module_server, post_run_code, run_python

SERVE_ARGS = ("--backend", "local", "--pool-size", "1", "--timeout", "5", "--memory-mb", "256")

PREAMBLE = (
    "import atexit, base64, json, os, re, sys\n"
    "open('out.txt', 'w').write('real')\n"
    "FAKE = json.dumps({'out.txt': base64.b64encode(b'forged').decode(),\n"
    "                   'extra.txt': base64.b64encode(b'forged').decode()})\n"
    "def markers():\n"
    "    found = set()\n"
    "    frame = sys._getframe()\n"
    "    values = list(globals().values())\n"
    "    while frame is not None:\n"
    "        values += [frame.f_code] + list(frame.f_globals.values())\n"
    "        frame = frame.f_back\n"
    "    for value in values:\n"
    "        code = getattr(value, '__code__', value)\n"
    "        for const in getattr(code, 'co_consts', ()):\n"
    "            if isinstance(const, str):\n"
    "                found.update(re.findall(r'agentenvs-files-[0-9a-f]+', const))\n"
    "    return found\n"
)
FORGERIES = {
    "reads_its_wrapper_and_exits": PREAMBLE
    + (
        "for marker in markers():\n"
        "    sys.stderr.write('\\n' + marker + FAKE + '\\n')\n"
        "sys.stderr.flush()\n"
        "os._exit(0)\n"
    ),
    "patches_stderr": PREAMBLE
    + (
        "class Rewrite:\n"
        "    def __init__(self, real):\n"
        "        self.real = real\n"
        "    def write(self, text):\n"
        "        for marker in markers():\n"
        "            if marker in text:\n"
        "                text = '\\n' + marker + FAKE + '\\n'\n"
        "        return self.real.write(text)\n"
        "    def flush(self):\n"
        "        self.real.flush()\n"
        "sys.stderr = Rewrite(sys.stderr)\n"
    ),
    "atexit_and_blind_markers": PREAMBLE
    + (
        "guesses = ['agentenvs-files-' + '0' * 32, 'agentenvs-files-', '']\n"
        "atexit.register(lambda: [sys.stderr.write('\\n' + g + FAKE + '\\n') for g in guesses])\n"
        "for g in guesses:\n"
        "    sys.stderr.write('\\n' + g + FAKE + '\\n')\n"
        "print(FAKE)\n"
    ),
}


server = module_server(*SERVE_ARGS, backends=("local", "docker"))


@pytest.mark.parametrize("name", list(FORGERIES))
def test_fetched_files_cannot_be_forged(server: ServerProcess, name: str) -> None:
    body = post_run_code(
        server.url,
        {
            "code": FORGERIES[name],
            "language": "python",
            "fetch_files": ["out.txt", "extra.txt"],
        },
    )
    assert body["status"] in ("Success", "Failed"), body
    files = {path: base64.b64decode(data) for path, data in body["files"].items()}
    assert files == {"out.txt": b"real"}, files


def test_a_symlink_is_not_fetched_through(server: ServerProcess) -> None:
    code = (
        "import os\nos.symlink('/etc/passwd', 'out.txt')\nos.symlink('/proc/self/environ', 'env')"
    )
    body = run_python(server, code, fetch_files=["out.txt", "env"])
    assert body["status"] == "Success", body
    assert body["files"] == {}
