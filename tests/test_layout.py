"""The rollout/ rooms by stage, and the version-one module paths that must keep working."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from agentenvs.rollout.moved import MOVED

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_old_module_path_is_the_module_at_its_new_home(old: str, new: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(new)


def test_old_from_import_gives_the_same_objects() -> None:
    from agentenvs.rollout.collect.collector import collect as new_collect
    from agentenvs.rollout.collector import collect as old_collect
    from agentenvs.rollout.data.samples import trajectories_to_samples as new_samples
    from agentenvs.rollout.samples import trajectories_to_samples as old_samples

    assert old_collect is new_collect
    assert old_samples is new_samples


def test_unknown_rollout_module_still_fails_to_import() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("agentenvs.rollout.no_such_module")


def test_no_flat_module_is_left_beside_the_rooms() -> None:
    """Every old name is an alias only: a file at the old place would shadow the table."""
    for old in MOVED:
        leaf = old.rsplit(".", 1)[1]
        assert not (ROOT / "rollout" / f"{leaf}.py").exists(), leaf


def _where_things_live_rows() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### Where things live", 1)[1].split("\n\n", 2)[1]
    rows = []
    for line in section.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append((cells[1], cells[2]))
    return rows


def test_readme_table_names_paths_that_exist() -> None:
    rows = _where_things_live_rows()
    assert len(rows) >= 8
    for folders, _ in rows:
        for path in re.findall(r"`([^`]+)`", folders):
            assert (ROOT / path).exists(), f"README names {path}, which is not in the tree"


def test_readme_table_names_entry_points_that_exist() -> None:
    modules = {
        "rollout/collect/": "agentenvs.rollout.collect",
        "rollout/data/": "agentenvs.rollout.data",
        "rollout/inspect/": "agentenvs.rollout.inspect",
    }
    for folders, entries in _where_things_live_rows():
        package = modules.get(folders.strip("`"))
        if package is None:
            continue
        for dotted in re.findall(r"`([a-z_]+\.[A-Za-z_]+)`", entries):
            module_name, attr = dotted.split(".")
            module = importlib.import_module(f"{package}.{module_name}")
            assert hasattr(module, attr), f"{package}.{dotted}"


def test_command_modules_stay_small() -> None:
    for path in (ROOT / "rollout" / "cli").glob("*.py"):
        lines = path.read_text(encoding="utf-8").count("\n")
        assert lines <= 300, f"{path.name} has {lines} lines"
