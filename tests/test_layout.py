"""The rollout/ rooms by stage and trainer; the module paths of version one are gone."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys

import pytest
from support.paths import REPO

ROOT = REPO

# Version one's flat modules and the split trainer folders, each with its home now.
# No alias resolves the old names any more (0.x has no users to protect): each must
# fail to import, and each new home must import.
OLD_TO_NEW: dict[str, str] = {
    "agentenvs.rollout.rollouts": "agentenvs.rollout.collect.rollouts",
    "agentenvs.rollout.collector": "agentenvs.rollout.collect.collector",
    "agentenvs.rollout.store": "agentenvs.rollout.collect.store",
    "agentenvs.rollout.records": "agentenvs.rollout.collect.records",
    "agentenvs.rollout.samples": "agentenvs.rollout.data.samples",
    "agentenvs.rollout.advantages": "agentenvs.rollout.data.advantages",
    "agentenvs.rollout.provenance": "agentenvs.rollout.data.provenance",
    "agentenvs.rollout.training_data": "agentenvs.rollout.data.training_data",
    "agentenvs.rollout.check": "agentenvs.rollout.inspect.check",
    "agentenvs.rollout.template_check": "agentenvs.rollout.inspect.template_check",
    "agentenvs.rollout.viewer": "agentenvs.rollout.inspect.viewer",
    "agentenvs.rollout.demo": "agentenvs.rollout.cli.demo",
    "agentenvs.rollout.moved": "agentenvs.rollout",
    "agentenvs.rollout.handoff": "agentenvs.rollout.trainers",
    "agentenvs.rollout.handoff.tinker": "agentenvs.rollout.trainers.tinker.handoff",
    "agentenvs.rollout.handoff.pytrio": "agentenvs.rollout.trainers.pytrio.handoff",
    "agentenvs.rollout.handoff.verl": "agentenvs.rollout.trainers.verl.handoff",
    "agentenvs.rollout.handoff.jsonl": "agentenvs.rollout.trainers.jsonl.handoff",
    "agentenvs.rollout.integrations": "agentenvs.rollout.trainers",
    "agentenvs.rollout.integrations.common": "agentenvs.rollout.trainers.common",
    "agentenvs.rollout.integrations.tinker_cookbook": "agentenvs.rollout.trainers.tinker.cookbook",
    "agentenvs.rollout.integrations.pytrio": "agentenvs.rollout.trainers.pytrio.sampling_policy",
    "agentenvs.rollout.integrations.trl": "agentenvs.rollout.trainers.trl.rollout_func",
    "agentenvs.rollout.integrations.trl_weight_sync": "agentenvs.rollout.trainers.trl.weight_sync",
    "agentenvs.rollout.integrations.verl": "agentenvs.rollout.trainers.verl.agent_loop",
    "agentenvs.rollout.weights.identity": "agentenvs.envs.weights_identity",
}

# The trainer folders: each holds its hand-off and its loop integration together.
TRAINER_MODULES: dict[str, tuple[str, ...]] = {
    "tinker": ("handoff", "cookbook"),
    "pytrio": ("handoff", "sampling_policy"),
    "trl": ("rollout_func", "weight_sync"),
    "verl": ("handoff", "agent_loop"),
    "jsonl": ("handoff",),
}


@pytest.mark.parametrize(("old", "new"), sorted(OLD_TO_NEW.items()))
def test_old_module_path_no_longer_imports_and_its_new_home_does(old: str, new: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
    # find_spec, not import: the new home must exist without loading torch, trl or verl here.
    assert importlib.util.find_spec(new) is not None, new


def test_old_from_import_fails_and_the_new_one_works() -> None:
    with pytest.raises(ModuleNotFoundError):
        exec("from agentenvs.rollout.collector import collect", {})
    with pytest.raises(ModuleNotFoundError):
        exec("from agentenvs.rollout.samples import trajectories_to_samples", {})
    from agentenvs.rollout.collect.collector import collect
    from agentenvs.rollout.data.samples import trajectories_to_samples

    assert callable(collect) and callable(trajectories_to_samples)


def test_unknown_rollout_module_still_fails_to_import() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("agentenvs.rollout.no_such_module")


def test_no_flat_module_is_left_beside_the_rooms() -> None:
    """The old flat files and the split trainer folders are gone from the tree."""
    for old in OLD_TO_NEW:
        rel = old.removeprefix("agentenvs.rollout.").replace(".", "/")
        assert not (ROOT / "rollout" / f"{rel}.py").exists(), rel
        assert not (ROOT / "rollout" / rel).is_dir(), rel


def test_no_alias_finder_is_installed() -> None:
    """Importing the package installs no meta-path finder of ours (version one's aliases)."""
    importlib.import_module("agentenvs.rollout")
    ours = [f for f in sys.meta_path if type(f).__module__.startswith("agentenvs")]
    assert ours == []


def test_viewer_has_no_alias_for_moved_names() -> None:
    """``render_terminal`` lives in ``terminal_view`` only; the viewer does not forward it."""
    viewer = importlib.import_module("agentenvs.rollout.inspect.viewer")
    assert "__getattr__" not in vars(viewer)
    assert not hasattr(viewer, "render_terminal")
    terminal_view = importlib.import_module("agentenvs.rollout.inspect.terminal_view")
    assert callable(terminal_view.render_terminal)


@pytest.mark.parametrize("trainer", sorted(TRAINER_MODULES))
def test_each_trainer_folder_holds_its_handoff_and_integration(trainer: str) -> None:
    folder = ROOT / "rollout" / "trainers" / trainer
    assert (folder / "__init__.py").is_file()
    for module in TRAINER_MODULES[trainer]:
        assert (folder / f"{module}.py").is_file(), f"trainers/{trainer}/{module}.py"
    assert not (ROOT / "rollout" / "handoff").exists()
    assert not (ROOT / "rollout" / "integrations").exists()


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


def test_every_code_folder_is_a_listed_package() -> None:
    # pyproject lists packages one by one; a folder left out installs from a checkout
    # (the editable install maps the whole tree) but is missing from a built wheel.
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "setuptools"
    ]
    listed = set(config["packages"])
    roots = {folder: name for name, folder in config["package-dir"].items()}
    found = set()
    for folder, name in roots.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *relative)))
    assert found - listed == set(), (
        f"folders with __init__.py not in pyproject packages: {sorted(found - listed)}"
    )
    assert listed - found == set(), f"pyproject packages without a folder: {sorted(listed - found)}"
