"""Finding ALFWorld games on disk: the shipped ones or the real dataset.

Both use ALFWorld's layout, ``json_2.1.1/<split>/<task folder>/<trial>/`` with a
``traj_data.json`` and a ``game.tw-pddl`` in each trial folder, where the task
folder is ``<task_type>-<object>-<movable receptacle>-<parent>-<scene>``. Like
ALFWorld's ``AlfredTWEnv``, games in ``movable`` or ``Sliced`` folders and games
not marked ``solvable`` are skipped.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from agentenvs.envs.alfworld.scenes import TASK_TYPES

logger = logging.getLogger(__name__)

SHIPPED_DATA = Path(__file__).parent / "data" / "json_2.1.1"
SPLITS = ("train", "valid_seen", "valid_unseen")
SPLIT_ALIASES = {
    "eval_in_distribution": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
}
"""ALFWorld's own names for the evaluation splits."""


@dataclass(frozen=True)
class GameInfo:
    path: str
    """The ``game.tw-pddl`` file."""
    split: str
    task_type: str
    name: str
    """``<task folder>/<trial folder>``: unique within a split."""


def split_name(split: str) -> str:
    name = SPLIT_ALIASES.get(split, split)
    if name not in SPLITS:
        known = ", ".join([*SPLITS, *SPLIT_ALIASES])
        raise ValueError(f"unknown ALFWorld split {split!r}; choose one of {known}")
    return name


def alfworld_home() -> Path:
    """Where ALFWorld keeps its data: ``$ALFWORLD_DATA``, else ``~/.cache/alfworld``.

    The same default ``alfworld.info`` sets (and ``alfworld-download`` writes to),
    computed here so the answer does not depend on whether that module was imported.
    """
    return Path(os.environ.get("ALFWORLD_DATA") or "~/.cache/alfworld").expanduser()


@functools.lru_cache(maxsize=8)
def _warn_shipped_fallback(looked_in: str) -> None:
    logger.warning(
        "ALFWorld data=auto: no dataset at %s, so the 16 games shipped with agentenvs are "
        "played. Run alfworld-download (or set ALFWORLD_DATA) for the real dataset, or pass "
        "data=shipped to silence this.",
        looked_in,
    )


def data_root(data: str) -> Path:
    """``shipped``, ``auto`` (ALFWorld's own data folder if it holds the dataset, else
    shipped, said loudly), or a folder: ``json_2.1.1`` itself or the folder above it."""
    if data == "shipped":
        return SHIPPED_DATA
    if data == "auto":
        home = alfworld_home() / "json_2.1.1"
        if home.is_dir():
            return home
        _warn_shipped_fallback(str(home))
        return SHIPPED_DATA
    root = Path(data).expanduser()
    if (root / "json_2.1.1").is_dir():
        root = root / "json_2.1.1"
    if not root.is_dir():
        raise FileNotFoundError(f"ALFWorld data folder {root} does not exist")
    if not any((root / split).is_dir() for split in SPLITS):
        if root.name in SPLITS or root.name in SPLIT_ALIASES:
            raise ValueError(
                f"ALFWorld data {root} is the {root.name!r} split itself; pass the folder "
                f"above it (data={root.parent}) and pick the split with the split argument"
            )
        raise ValueError(
            f"ALFWorld data folder {root} has no {', '.join(SPLITS)} folder; pass "
            "json_2.1.1 (or the folder holding it), as alfworld-download lays it out"
        )
    return root


def task_type_of(task_folder: str) -> str:
    return task_folder.split("-", 1)[0]


@functools.lru_cache(maxsize=64)
def find_games(
    root: str, split: str, task_types: tuple[str, ...] = TASK_TYPES
) -> tuple[GameInfo, ...]:
    """Every playable game of ``split`` under ``root``, in a stable (sorted) order."""
    split = split_name(split)
    split_dir = Path(root) / split
    if not split_dir.is_dir():
        return ()
    wanted = set(task_types)
    games = []
    for dirpath, _dirs, files in os.walk(split_dir):
        if "traj_data.json" not in files or "game.tw-pddl" not in files:
            continue
        if "movable" in dirpath or "Sliced" in dirpath:
            continue
        trial = Path(dirpath)
        task_type = task_type_of(trial.parent.name)
        if task_type not in TASK_TYPES:  # a folder not named the ALFWorld way
            task_type = json.loads((trial / "traj_data.json").read_text())["task_type"]
        if task_type not in wanted:
            continue
        if not _solvable(trial / "game.tw-pddl"):
            continue
        games.append(
            GameInfo(
                path=str(trial / "game.tw-pddl"),
                split=split,
                task_type=task_type,
                name=f"{trial.parent.name}/{trial.name}",
            )
        )
    games.sort(key=lambda g: g.name)
    return tuple(games)


def _solvable(game_file: Path) -> bool:
    try:
        return bool(json.loads(game_file.read_text()).get("solvable", False))
    except (OSError, ValueError):
        return False
