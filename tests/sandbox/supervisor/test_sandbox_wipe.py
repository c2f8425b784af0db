"""The supervisor's wipe and bundle, on the host's real file system (no sandbox needed).

The wipe runs as root here, where permission bits do not stop it; the escape suite runs
the same traps inside the sandbox as an unprivileged uid.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

from agentenvs.sandbox.supervisor import bundle
from agentenvs.sandbox.supervisor.wipe import ScratchDir


def _scratch(tmp_path: Path) -> tuple[Path, ScratchDir]:
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    scratch = ScratchDir.measure(str(work))
    assert scratch is not None
    return work, scratch


def test_wipe_survives_traps_and_never_follows_symlinks(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    work, scratch = _scratch(tmp_path)
    (work / "locked" / "inner").mkdir(parents=True)
    (work / "locked" / "inner" / "f").write_text("x")
    os.chmod(work / "locked" / "inner", 0)
    os.chmod(work / "locked", 0o600)
    (work / "to-outside").symlink_to(outside)
    (work / "loop").symlink_to("loop")
    os.link(outside / "keep.txt", work / "hard")
    os.mkfifo(work / "fifo")
    fd = os.open(work, os.O_RDONLY)
    for _ in range(5000):  # deeper than PATH_MAX allows as one path
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    os.chmod(work, 0)
    report = scratch.wipe(max_seconds=30)
    assert report.clean, report
    assert os.listdir(work) == []
    assert (outside / "keep.txt").read_text() == "keep"
    assert os.stat(work).st_mode & 0o777 == 0o700


def test_wipe_over_budget_reports_instead_of_raising(tmp_path: Path) -> None:
    work, scratch = _scratch(tmp_path)
    for i in range(300):
        (work / f"f{i}").touch()
    report = scratch.wipe(max_entries=100)
    assert not report.clean and "100 entries" in report.reason, report


def test_bundle_ships_every_module_stdlib_only() -> None:
    shipped = bundle.module_sources()
    on_disk = {p.stem for p in Path(bundle.__file__).parent.glob("*.py")} - {"bundle"}
    assert set(shipped) == on_disk  # a new module that is not shipped would fail in the sandbox
    for name, source in shipped.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.level:
                continue  # a sibling, shipped with it
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for module in names:
                top = module.split(".")[0]
                assert top == "__future__" or top in sys.stdlib_module_names, (name, module)
    compile(bundle.bundle_source(), "bundle", "exec")
