"""Build the sandbox image from this Debian host's own files: no registry needed.

No registry is reachable from the machines this project runs on, so there is no
``FROM python:3.11``. Instead the image is a minimal root filesystem assembled from
files already on the host, then imported (``docker import`` through the API, which
podman's Docker-compatible service supports too):

- Debian's interpreter (``/usr/bin/python3.11``) and its standard library, minus the
  test suite, IDLE, tkinter and other parts sandboxed code cannot use;
- Debian's ``numpy``, ``sympy`` and ``mpmath`` (``python3-numpy``, ``python3-sympy``),
  with their byte-compiled ``__pycache__`` (the root filesystem is read-only, so nothing
  could ever be compiled at run time) but without their own test suites;
- the shared libraries all of the above link against (the ``ldd`` closure), with the
  symlink chains that lead to them (``/etc/alternatives`` for BLAS/LAPACK);
- Debian's ``bash`` and a few coreutils, for ``language="bash"`` (run by the same
  supervisor, under the same restrictions as Python);
- a synthetic ``/etc/passwd``, ``/etc/group`` and empty mount points.

No package manager, no compiler: ~145 MB. The image carries a label with a
hash of its recipe and of every source file's path, size and mtime; :func:`ensure_image`
skips the build when an image with the same hash already exists, so rebuilding after a
Debian package upgrade happens by itself.

Run by hand: ``python -m agentenvs.sandbox.backends.docker.image [--docker-host URL] [--force]``.
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import hashlib
import io
import json
import os
import re
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from agentenvs.envs.errors import AgentEnvsError

IMAGE_TAG = "agentenvs-sandbox:latest"
HASH_LABEL = "io.agentenvs.sandbox.content-hash"
RECIPE_VERSION = "3"
"""Bump when the recipe below changes in a way file metadata cannot show."""

HOST_PYTHON = "/usr/bin/python3.11"
PACKAGES_DIR = "/usr/lib/python3/dist-packages"
PACKAGES = ("numpy", "sympy", "mpmath")
STDLIB_EXCLUDE = {
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "pydoc_data",
    "dist-packages",
    "site-packages",
    "config-*",
}
PACKAGE_EXCLUDE = {"tests", "benchmarks"}
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
SHELL_TOOLS = (
    "/usr/bin/bash",
    *(
        f"/usr/bin/{name}"
        for name in (
            "cat",
            "echo",
            "ls",
            "wc",
            "head",
            "tail",
            "sort",
            "uniq",
            "tr",
            "cut",
            "seq",
            "printf",
            "sleep",
            "true",
            "false",
            "env",
            "mkdir",
            "rm",
            "cp",
            "mv",
            "touch",
            "grep",
            "sed",
            "tee",
            "expr",
            "basename",
            "dirname",
            "date",
        )
    ),
)
"""``language="bash"``: the shell and the commands scripts most often call."""
C_LOCALE = "/usr/lib/locale/C.utf8"

ETC_FILES = {
    # No root entry: nothing in the image runs as root, and its absence makes a leaked
    # host /etc/passwd easy to tell apart.
    "etc/passwd": "sandbox:x:1000:1000:sandbox:/tmp:/usr/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "etc/group": "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n",
    "etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
    "etc/hosts": "127.0.0.1 localhost\n::1 localhost\n",
    "etc/hostname": "sandbox\n",
    "etc/resolv.conf": "",
}
EMPTY_DIRS = {
    "tmp": 0o1777,
    "proc": 0o555,
    "sys": 0o555,
    "dev": 0o755,
    "root": 0o700,
    "run": 0o755,
    "var": 0o755,
    "var/tmp": 0o1777,
}
MERGED_USR_LINKS = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}


class ImageBuildError(AgentEnvsError, RuntimeError):
    """The host lacks what the image is made from, or the engine refused the import."""


@dataclass
class Entry:
    arcname: str
    """Path inside the image, without a leading slash."""
    kind: str  # "file" | "dir" | "symlink" | "data"
    source: str = ""
    """Host path (file/dir), link target (symlink) or content (data)."""
    mode: int = 0o755


@dataclass
class RootfsPlan:
    """Every entry of the image's root filesystem, in tar order."""

    entries: dict[str, Entry] = field(default_factory=dict)

    def add(self, entry: Entry) -> None:
        self.entries.setdefault(entry.arcname, entry)

    def add_parents(self, arcname: str) -> None:
        parts = PurePosixPath(arcname).parts[:-1]
        for i in range(1, len(parts) + 1):
            name = "/".join(parts[:i])
            if name not in self.entries:
                self.entries[name] = Entry(name, "dir", mode=0o755)

    def add_host_path(self, host_path: str | Path, *, exclude: set[str] | None = None) -> None:
        """Copy a host path, following symlink chains (each link is kept as a link)."""
        seen: set[str] = set()
        pending = [str(host_path)]
        while pending:
            raw = pending.pop()
            # Resolve the directory part (merged /usr: /lib -> /usr/lib), keep the leaf.
            path = Path(os.path.realpath(os.path.dirname(raw) or "/")) / os.path.basename(raw)
            arcname = str(path).lstrip("/")
            if arcname in seen or not arcname:
                continue
            seen.add(arcname)
            self.add_parents(arcname)
            if path.is_symlink():
                target = os.readlink(path)
                self.add(Entry(arcname, "symlink", target))
                pending.append(target if os.path.isabs(target) else str(path.parent / target))
            elif path.is_dir():
                self._add_tree(path, exclude or set())
            elif path.is_file():
                self.add(Entry(arcname, "file", str(path), stat.S_IMODE(path.stat().st_mode)))
            else:
                raise ImageBuildError(f"{raw} does not exist on this host")

    def _add_tree(self, root: Path, exclude: set[str]) -> None:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(
                d for d in dirnames if not any(fnmatch.fnmatch(d, pat) for pat in exclude)
            )
            base = Path(dirpath)
            arc = str(base).lstrip("/")
            self.add_parents(arc)
            self.add(Entry(arc, "dir", mode=stat.S_IMODE(base.stat().st_mode)))
            for name in sorted(dirnames):
                if (base / name).is_symlink():
                    self.add_host_path(base / name)
            for name in sorted(filenames):
                full = base / name
                if full.is_symlink():
                    self.add_host_path(full)
                elif full.is_file():
                    mode = stat.S_IMODE(full.stat().st_mode)
                    self.add(Entry(str(full).lstrip("/"), "file", str(full), mode))

    def add_data(self, arcname: str, content: str, mode: int = 0o644) -> None:
        self.add_parents(arcname)
        self.add(Entry(arcname, "data", content, mode))

    def shared_objects(self) -> list[str]:
        return [
            e.source
            for e in self.entries.values()
            if e.kind == "file" and re.search(r"\.so(\.[\d.]+)?$", e.source)
        ]


def linked_libraries(binaries: list[str]) -> set[str]:
    """Host paths of every shared library the binaries load (``ldd``, transitively)."""
    libraries: set[str] = set()
    for chunk_start in range(0, len(binaries), 64):
        chunk = binaries[chunk_start : chunk_start + 64]
        out = subprocess.run(["ldd", *chunk], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            match = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
            if match:
                libraries.add(match.group(1))
    return libraries


def plan_rootfs(
    python: str = HOST_PYTHON,
    packages: tuple[str, ...] = PACKAGES,
    packages_dir: str = PACKAGES_DIR,
) -> RootfsPlan:
    if not os.access(python, os.X_OK):
        raise ImageBuildError(
            f"{python} is missing: the image is assembled from Debian's python3 (apt-get install "
            "python3 python3-numpy python3-sympy)"
        )
    version = re.search(r"python(\d+\.\d+)$", python)
    if version is None:
        raise ImageBuildError(f"cannot tell the Python version from {python!r}")
    stdlib = f"/usr/lib/python{version.group(1)}"
    plan = RootfsPlan()
    for name, mode in EMPTY_DIRS.items():
        plan.add(Entry(name, "dir", mode=mode))
    for name, target in MERGED_USR_LINKS.items():
        plan.add(Entry(name, "symlink", target))
    plan.add_host_path(python)
    plan.add(Entry("usr/bin/python3", "symlink", os.path.basename(python)))
    plan.add_host_path(stdlib, exclude=STDLIB_EXCLUDE)
    for package in packages:
        path = Path(packages_dir) / package
        if not path.exists():
            raise ImageBuildError(
                f"{path} is missing: apt-get install python3-{package} (the image copies it)"
            )
        plan.add_host_path(path, exclude=PACKAGE_EXCLUDE)
        for meta in sorted(Path(packages_dir).glob(f"{package}-*.*-info")):
            plan.add_host_path(meta)
    tools = [tool for tool in SHELL_TOOLS if os.access(tool, os.X_OK)]
    for tool in tools:
        plan.add_host_path(tool)
    if tools and os.path.isdir(C_LOCALE):
        plan.add_host_path(C_LOCALE)  # bash warns on every run without it (LC_ALL=C.UTF-8)
    binaries = [python, *tools, *plan.shared_objects()]
    for library in sorted(linked_libraries(binaries)):
        plan.add_host_path(library)
    for arcname, content in ETC_FILES.items():
        plan.add_data(arcname, content)
    for name in ("usr/local/bin", "usr/lib64", "dev/shm"):
        plan.add_parents(name + "/x")
    return plan


def content_hash(plan: RootfsPlan, changes: list[str]) -> str:
    """A hash of the recipe and of every entry's metadata (not the bytes: fast)."""
    digest = hashlib.sha256(f"recipe {RECIPE_VERSION}\n".encode())
    digest.update(json.dumps(changes).encode())
    for entry in plan.entries.values():
        meta: Any = entry.source
        if entry.kind == "file":
            st = os.stat(entry.source)
            meta = [st.st_size, st.st_mtime_ns]
        digest.update(json.dumps([entry.arcname, entry.kind, entry.mode, meta]).encode())
    return digest.hexdigest()[:32]


def write_tarball(plan: RootfsPlan, target: Path | io.BufferedIOBase) -> int:
    """Write the root filesystem as a tar archive; returns the number of entries."""
    fileobj = target.open("wb") if isinstance(target, Path) else target
    try:
        with tarfile.open(fileobj=fileobj, mode="w|", format=tarfile.GNU_FORMAT) as tar:
            for entry in plan.entries.values():
                info = tarfile.TarInfo(entry.arcname)
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mode = entry.mode
                info.mtime = 0
                if entry.kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif entry.kind == "symlink":
                    info.type = tarfile.SYMTYPE
                    info.linkname = entry.source
                    info.mode = 0o777
                    tar.addfile(info)
                elif entry.kind == "data":
                    data = entry.source.encode()
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                else:
                    info.size = os.stat(entry.source).st_size
                    info.mtime = int(os.stat(entry.source).st_mtime)
                    with open(entry.source, "rb") as f:
                        tar.addfile(info, f)
    finally:
        if isinstance(target, Path):
            fileobj.close()
    return len(plan.entries)


def image_changes(content: str | None = None) -> list[str]:
    changes = [
        f"ENV PATH={SANDBOX_PATH}",
        "ENV LANG=C.UTF-8",
        "WORKDIR /tmp",
        "USER 65534:65534",
        'CMD ["/usr/bin/python3", "-I", "-S", "-B", "-c", "print(1)"]',
    ]
    if content is not None:
        changes.append(f"LABEL {HASH_LABEL}={content}")
    return changes


@dataclass
class ImageInfo:
    tag: str
    content_hash: str
    built: bool
    """False when an image with the same content hash already existed."""
    seconds: float
    entries: int = 0
    tar_bytes: int = 0


def existing_hash(client: Any, tag: str) -> str | None:
    import docker.errors

    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    labels = (image.attrs.get("Config") or {}).get("Labels") or image.labels or {}
    return labels.get(HASH_LABEL)


@functools.lru_cache(maxsize=4)
def _planned(python: str) -> tuple[RootfsPlan, str]:
    """The plan and its hash, computed once per process (``ldd`` over ~100 libraries)."""
    plan = plan_rootfs(python)
    return plan, content_hash(plan, image_changes())


def ensure_image(
    client: Any, tag: str = IMAGE_TAG, *, force: bool = False, python: str = HOST_PYTHON
) -> ImageInfo:
    """Build and import the image unless one with the same content hash exists."""
    start = time.monotonic()
    plan, content = _planned(python)
    if not force and existing_hash(client, tag) == content:
        return ImageInfo(tag, content, built=False, seconds=time.monotonic() - start)
    repository, _, version = tag.rpartition(":")
    if not repository or "/" in version:
        repository, version = tag, "latest"
    with tempfile.TemporaryDirectory(prefix="agentenvs-image-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        count = write_tarball(plan, tarball)
        size = tarball.stat().st_size
        try:
            client.api.import_image(
                src=str(tarball), repository=repository, tag=version, changes=image_changes(content)
            )
        except Exception as exc:
            raise ImageBuildError(f"the engine refused to import the image: {exc}") from exc
    if existing_hash(client, tag) != content:
        raise ImageBuildError(
            f"imported {tag} but it does not carry the label {HASH_LABEL}={content} "
            "(does the engine support import with --change LABEL?)"
        )
    return ImageInfo(tag, content, True, time.monotonic() - start, count, size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docker-host", help="engine URL (default: $DOCKER_HOST)")
    parser.add_argument("--tag", default=IMAGE_TAG)
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--tarball", type=Path, help="only write the root filesystem here")
    args = parser.parse_args(argv)
    if args.tarball:
        plan = plan_rootfs()
        count = write_tarball(plan, args.tarball)
        print(
            f"wrote {count} entries to {args.tarball} (content hash {content_hash(plan, image_changes())})"
        )
        return 0
    import docker

    client = (
        docker.DockerClient(base_url=args.docker_host) if args.docker_host else docker.from_env()
    )
    info = ensure_image(client, args.tag, force=args.force)
    verb = "built" if info.built else "up to date:"
    print(f"{verb} {info.tag} (content hash {info.content_hash}) in {info.seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
