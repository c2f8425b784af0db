"""Running the user's code inside a forked child, the way a notebook cell runs.

The child has already been restricted (``restrictions``); this module gives it fresh
standard streams on the capped pipes, default signal handlers, and runs the code with
the value of a final bare expression shown, as IPython does. Nothing here may raise out
of the child: a failure of our own is written to the child's stderr instead.
"""

from __future__ import annotations

import ast
import contextlib
import io
import linecache
import os
import signal
import sys
import tokenize
import traceback

INTERNAL_ERROR_EXIT = 70
LANGUAGES = ("python", "bash")
BASH = "/bin/bash"
LAST_UNCAUGHT: type | None = None
"""The type of the exception that ended the last cell run in this process, if any."""


def _user_frames(tb):
    """Drop the supervisor's own frames from the top of a traceback."""
    # "agentenvs-supervisor/<module>.py" in the sandbox, the package's directory on the host
    own = os.path.dirname(_user_frames.__code__.co_filename)
    while tb is not None and os.path.dirname(tb.tb_frame.f_code.co_filename) == own:
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


def install_std_streams() -> None:
    def stream(fd: int, mode: str):
        raw = io.FileIO(fd, mode, closefd=False)
        if mode == "r":
            return io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8", errors="replace")
        return io.TextIOWrapper(
            io.BufferedWriter(raw), encoding="utf-8", errors="backslashreplace", line_buffering=True
        )

    sys.stdin, sys.stdout, sys.stderr = stream(0, "r"), stream(1, "w"), stream(2, "w")
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def flush_std_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()


def reset_signals() -> None:
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


def report_internal_failure() -> None:
    """Our own bug in a child: say so on its stderr (the cell's pipe) before exiting."""
    with contextlib.suppress(BaseException):
        os.write(2, ("sandbox internal error:\n" + traceback.format_exc()).encode(errors="replace"))


def text_fd(data: str | None, name: str = "stdin") -> int:
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


def exec_bash(script: str) -> None:
    """Replace this (already restricted) child with bash running ``script``.

    Seccomp, no_new_privs, Landlock, the rlimits, the session and the namespaces all
    survive ``execve``: bash runs exactly as confined as Python code. The script is
    read from a memfd (no argument-size limit, no file in the work dir).
    """
    fd = os.memfd_create("script", 0)  # inherited by bash, which reads it by path
    view = memoryview(script.encode("utf-8", errors="surrogateescape"))
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    flush_std_streams()
    try:
        os.execve(BASH, ["bash", f"/proc/self/fd/{fd}"], dict(os.environ))
    except OSError as exc:
        os.write(2, f"sandbox: cannot run bash ({BASH}): {exc}\n".encode())
        os._exit(127)
