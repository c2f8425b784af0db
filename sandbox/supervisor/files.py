"""Files into the work dir before a run, and back out after it, by the supervisor.

Issue class 7. Files travel in the request and answer frames, written and read by the
supervisor, never by the program's process: there is no marker in the program's output
to forge, and nothing the program can write reaches the answer's ``files`` except the
contents of the files it was asked for.

Both directions resolve a path one component at a time from a descriptor of the work dir
(``openat`` with ``O_NOFOLLOW``), so no symlink is followed and nothing outside the work
dir is reached, whatever the program left there. Only regular files are fetched, each at
most ``max_file_bytes`` and all together at most ``MAX_FETCH_TOTAL_BYTES``; a path that is
absolute, empty, or has a ``.``/``..`` component is refused.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import stat

MAX_FETCH_TOTAL_BYTES = 32 * 1024 * 1024
"""All fetched files of one run together (the answer frame must stay far below its cap)."""
MAX_PATH_BYTES = 1024
NAME_MAX_BYTES = 255
"""The longest name (one path component) the kernel takes, in bytes."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class BadPath(ValueError):
    """A path the files API refuses, with the reason."""


def path_parts(path: object) -> list[str]:
    """The components of a relative path inside the work dir; raises :class:`BadPath`."""
    if not isinstance(path, str) or not path:
        raise BadPath(f"{path!r}: a path must be a non-empty string")
    if "\0" in path or len(path.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        raise BadPath(f"{path!r}: NUL byte or longer than {MAX_PATH_BYTES} bytes")
    if path.startswith("/"):
        raise BadPath(f"{path!r}: absolute paths are refused (paths are relative to the work dir)")
    parts = [part for part in path.split("/") if part]
    if any(part in (".", "..") for part in parts):
        raise BadPath(f"{path!r}: '.' and '..' components are refused")
    if any(len(part.encode("utf-8", "surrogateescape")) > NAME_MAX_BYTES for part in parts):
        raise BadPath(f"{path!r}: a name longer than {NAME_MAX_BYTES} bytes (NAME_MAX)")
    return parts


def paths_problem(files: object, fetch: object) -> str:
    """Why the request's ``files``/``fetch_files`` are refused ("" when they are fine)."""
    if files is not None and not isinstance(files, dict):
        return "files: expected an object of path -> base64 content"
    if fetch is not None and not isinstance(fetch, list):
        return "fetch_files: expected a list of paths"
    for field, paths in (("files", files or {}), ("fetch_files", fetch or [])):
        for path in paths:
            try:
                path_parts(path)
            except BadPath as exc:
                return f"{field}: {exc}"
    return ""


def _open_parent(root: int, parts: list[str], *, create: bool) -> int:
    """A descriptor of the directory holding the last component (caller closes it)."""
    fd = os.dup(root)
    try:
        for part in parts[:-1]:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def put_files(workdir: str, files: object) -> str:
    """Write ``{path: base64}`` into the work dir; an error message, or "" on success."""
    if not files:
        return ""
    if not isinstance(files, dict):
        return "files: expected an object of path -> base64 content"
    root = os.open(workdir, _DIR_FLAGS)
    try:
        for path, encoded in files.items():
            try:
                parts = path_parts(path)
                data = base64.b64decode(str(encoded), validate=True)
            except BadPath as exc:
                return f"files: {exc}"
            except (binascii.Error, ValueError):
                return f"files: {path!r}: content is not valid base64"
            try:
                parent = _open_parent(root, parts, create=True)
                try:
                    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                    fd = os.open(parts[-1], flags, 0o644, dir_fd=parent)
                finally:
                    os.close(parent)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            except OSError as exc:
                return f"files: cannot write {path!r}: {exc.strerror or exc}"
    finally:
        os.close(root)
    return ""


def fetch_files(workdir: str, paths: object, max_file_bytes: int) -> tuple[dict[str, str], str]:
    """Read the requested regular files: ``({path: base64}, error message or "")``.

    A path that does not exist, is not a regular file, is reached through a symlink or
    is larger than ``max_file_bytes`` is simply absent from the result.
    """
    if not paths:
        return {}, ""
    if not isinstance(paths, list):
        return {}, "fetch_files: expected a list of paths"
    found: dict[str, str] = {}
    total = 0
    try:
        root = os.open(workdir, _DIR_FLAGS)
    except OSError as exc:
        return {}, f"fetch_files: cannot open the work dir: {exc}"
    try:
        for path in paths:
            try:
                parts = path_parts(path)
            except BadPath as exc:
                return {}, f"fetch_files: {exc}"
            data = _read_regular(root, parts, max_file_bytes)
            if data is None or total + len(data) > MAX_FETCH_TOTAL_BYTES:
                continue
            total += len(data)
            found[path] = base64.b64encode(data).decode()
    finally:
        os.close(root)
    return found, ""


def _read_regular(root: int, parts: list[str], max_bytes: int) -> bytes | None:
    try:
        parent = _open_parent(root, parts, create=False)
    except OSError:
        return None
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(parts[-1], flags, dir_fd=parent)
    except OSError:
        return None
    finally:
        os.close(parent)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return None
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return None if size > max_bytes else b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)
