"""Emptying the directories an execution could write to, within a budget, never raising.

Issue classes 1 and 8. A hostile program controls what it leaves in the work dir: mode
000 directories, directories without the x bit, trees thousands of levels deep (a
recursive ``rmtree`` raises ``RecursionError`` and paths outgrow ``PATH_MAX``), hundreds
of thousands of files, symlinks pointing anywhere, hardlinks, and changed mode, times or
extended attributes on the directory itself. The wipe here:

- walks iteratively with one open directory descriptor at a time (``openat`` relative to
  the parent, ``..`` to come back up), so neither depth nor path length matters;
- never follows a symlink (entries are typed with ``lstat`` semantics, directories are
  opened ``O_NOFOLLOW``) and gives itself back the permissions it needs on directories it
  owns (``chmod 0700`` before entering);
- stops at a budget of entries and seconds, and returns a :class:`WipeReport` instead of
  raising, whatever the kernel says;
- proves the result: the directory is empty, its own mode, times and xattrs are back to
  what they were at start-up and, when it is a mount of its own (a tmpfs), the file
  system's inode and block counts are back at their baseline (nothing unlinked but still
  held, nothing unreachable).

When a directory cannot be proven clean within the budget, the caller recycles the worker
instead (a fresh one is cheaper than a long wipe, and always clean). Counting the inodes
of a tmpfs is one ``statvfs``: :meth:`ScratchDir.too_big_to_wipe` lets the supervisor
decide to recycle *before* answering, so the hostile run's cost is not pushed onto the
next one.

Only called once every process of the execution is dead (nothing races the walk).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from dataclasses import dataclass

MAX_WIPE_ENTRIES = 20_000
"""Entries one wipe may visit. ~10 us each on tmpfs: ~0.2 s, about a third of a respawn."""
MAX_WIPE_SECONDS = 0.5
CHECK_CLOCK_EVERY = 256
"""Entries between two looks at the clock."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class WipeReport:
    clean: bool
    entries: int = 0
    seconds: float = 0.0
    reason: str = ""
    """Why the directory is not proven clean (empty when it is)."""


class WipeAborted(Exception):
    """The walk met something it cannot remove, or ran out of budget."""


@dataclass
class ScratchDir:
    """One directory the code may write to, and what "clean" means for it."""

    path: str
    mode: int
    times_ns: tuple[int, int]
    own_mount: bool
    """A file system of its own (a tmpfs): its inode/block counts prove emptiness."""
    baseline_inodes: int
    baseline_blocks: int

    @classmethod
    def measure(cls, path: str) -> ScratchDir | None:
        """Take the baseline of a directory as it is now (clean); None if it is unusable."""
        try:
            st = os.lstat(path)
            parent = os.lstat(os.path.dirname(path.rstrip("/")) or "/")
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        own_mount = st.st_dev != parent.st_dev
        inodes, blocks = _usage(path) if own_mount else (0, 0)
        return cls(
            path=path,
            mode=stat.S_IMODE(st.st_mode),
            times_ns=(st.st_atime_ns, st.st_mtime_ns),
            own_mount=own_mount,
            baseline_inodes=inodes,
            baseline_blocks=blocks,
        )

    def entries_in_use(self) -> int | None:
        """Files and directories on this file system beyond the baseline (None: unknown)."""
        if not self.own_mount:
            return None
        try:
            return max(0, _usage(self.path)[0] - self.baseline_inodes)
        except OSError:
            return None

    def too_big_to_wipe(self, max_entries: int = MAX_WIPE_ENTRIES) -> bool:
        """One ``statvfs``: more entries than a wipe may visit (recycle instead)."""
        used = self.entries_in_use()
        return used is not None and used > max_entries

    def wipe(
        self, *, max_entries: int = MAX_WIPE_ENTRIES, max_seconds: float = MAX_WIPE_SECONDS
    ) -> WipeReport:
        """Empty the directory and prove it; never raises."""
        started = time.monotonic()
        try:
            report = self._wipe(started, max_entries, max_seconds)
        except Exception as exc:  # the contract is "never raises": say why instead
            report = WipeReport(False, reason=f"{type(exc).__name__}: {exc}")
        report.seconds = time.monotonic() - started
        return report

    def _wipe(self, started: float, max_entries: int, max_seconds: float) -> WipeReport:
        if self.too_big_to_wipe(max_entries):
            return WipeReport(False, reason=f"more than {max_entries} entries: recycle")
        with contextlib.suppress(OSError):
            os.chmod(self.path, 0o700 | self.mode)  # the code may have taken our rights
        walk = _Walk(deadline=started + max_seconds, max_entries=max_entries)
        try:
            walk.empty(self.path)
        except WipeAborted as exc:
            return WipeReport(False, walk.entries, reason=str(exc))
        self._restore_root()
        reason = self._unproven()
        return WipeReport(not reason, walk.entries, reason=reason)

    def _restore_root(self) -> None:
        """Mode, times and extended attributes of the directory itself: a channel too."""
        with contextlib.suppress(OSError):
            os.chmod(self.path, self.mode)
        with contextlib.suppress(OSError):
            os.utime(self.path, ns=self.times_ns, follow_symlinks=False)
        for name in _xattrs(self.path):
            with contextlib.suppress(OSError):
                os.removexattr(self.path, name, follow_symlinks=False)

    def _unproven(self) -> str:
        """Empty string when the directory is provably as it was at start-up."""
        try:
            if os.listdir(self.path):
                return "entries remain after the wipe"
            st = os.lstat(self.path)
            if stat.S_IMODE(st.st_mode) != self.mode:
                return "the directory's mode could not be restored"
            if _xattrs(self.path):
                return "extended attributes remain on the directory"
            if self.own_mount:
                inodes, blocks = _usage(self.path)
                if inodes > self.baseline_inodes or blocks > self.baseline_blocks:
                    return (
                        f"the file system still holds {inodes - self.baseline_inodes} inodes / "
                        f"{blocks - self.baseline_blocks} blocks (unlinked but still open?)"
                    )
        except OSError as exc:
            return f"cannot check the directory: {exc}"
        return ""


def _xattrs(path: str) -> list[str]:
    """Extended attribute names of ``path`` ([] where the file system has none)."""
    try:
        return os.listxattr(path, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return []
        raise


def _usage(path: str) -> tuple[int, int]:
    st = os.statvfs(path)
    return st.f_files - st.f_ffree, st.f_blocks - st.f_bfree


class _Walk:
    """Depth-first removal with one directory descriptor open at a time."""

    def __init__(self, *, deadline: float, max_entries: int) -> None:
        self.deadline = deadline
        self.max_entries = max_entries
        self.entries = 0

    def _count(self) -> None:
        self.entries += 1
        if self.entries > self.max_entries:
            raise WipeAborted(f"more than {self.max_entries} entries: recycle")
        if self.entries % CHECK_CLOCK_EVERY == 0 and time.monotonic() > self.deadline:
            raise WipeAborted("the wipe ran out of time: recycle")

    def empty(self, root: str) -> None:
        fd = os.open(root, _DIR_FLAGS)
        names: list[str] = []  # the path from the root to ``fd``, one name per level
        try:
            while True:
                subdir = self._clear_files(fd)
                if subdir is not None:
                    with contextlib.suppress(OSError):
                        os.chmod(subdir, 0o700, dir_fd=fd)  # a real dir: typed without following
                    try:
                        child = os.open(subdir, _DIR_FLAGS, dir_fd=fd)
                    except OSError as exc:
                        raise WipeAborted(f"cannot enter a directory: {exc}") from exc
                    os.close(fd)
                    fd = child
                    names.append(subdir)
                    continue
                if not names:
                    return
                parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = parent
                try:
                    os.rmdir(names.pop(), dir_fd=fd)
                except OSError as exc:
                    raise WipeAborted(f"cannot remove a directory: {exc}") from exc
        finally:
            os.close(fd)

    def _clear_files(self, fd: int) -> str | None:
        """Remove every non-directory and empty directory here; a non-empty one's name."""
        try:
            listing = os.scandir(fd)
        except PermissionError:
            os.fchmod(fd, 0o700)
            listing = os.scandir(fd)
        except OSError as exc:
            raise WipeAborted(f"cannot list a directory: {exc}") from exc
        with listing as entries:
            for entry in entries:
                self._count()
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False
                try:
                    if is_dir:
                        os.rmdir(entry.name, dir_fd=fd)
                    else:
                        os.unlink(entry.name, dir_fd=fd)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    if is_dir:
                        return entry.name  # not empty (or not ours to list): go inside
                    raise WipeAborted(f"cannot remove a file: {exc}") from exc
        return None
