"""Importing the interface must not load an environment, the sandbox or gymnasium.

A plugin author who writes ``from agentenvs.envs.types import Env`` (and every room
that only needs the contract) should pay for the contract alone, not for every
registered environment's config, the flagships' dependencies and gymnasium.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

FLAGSHIPS = ("search_r1", "retool", "alfworld", "guess_number")


def imported_modules(statement: str) -> list[str]:
    """Module names ``python -X importtime -c statement`` reports, in import order."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    names = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        name = line.rsplit("|", 1)[1].strip()
        if name != "imported package":
            names.append(name)
    return names


def heavy(names: list[str]) -> list[str]:
    flagship = tuple(f"agentenvs.envs.{name}" for name in FLAGSHIPS)
    return [
        name
        for name in names
        if name.startswith(flagship)
        or name == "agentenvs.sandbox"
        or name.startswith("agentenvs.sandbox.")
        or name == "gymnasium"
        or name.startswith("gymnasium.")
    ]


@pytest.mark.parametrize(
    "statement",
    [
        "import agentenvs.envs.types",
        "import agentenvs.envs.errors",
        "import agentenvs.envs",
        "from agentenvs.envs import Env, EnvGroupBuilder, TextEnv, make",
    ],
)
def test_interface_import_loads_no_environment(statement: str) -> None:
    names = imported_modules(statement)
    assert "agentenvs.envs" in names, names  # the probe did see the import
    assert heavy(names) == [], f"{statement!r} imported {heavy(names)}"


def test_errors_module_imports_nothing_of_the_library() -> None:
    names = imported_modules("import agentenvs.envs.errors")
    ours = [n for n in names if n.startswith("agentenvs") and n != "agentenvs"]
    assert ours == ["agentenvs.envs", "agentenvs.envs.errors"] or ours == [
        "agentenvs.envs.errors",
        "agentenvs.envs",
    ], ours


def test_listing_names_loads_no_config() -> None:
    statement = "from agentenvs.envs import registry; print(registry.env_names())"
    names = imported_modules(statement)
    assert heavy(names) == [], f"listing names imported {heavy(names)}"


def test_every_name_of_the_face_resolves() -> None:
    import agentenvs.envs as envs

    missing = [name for name in envs.__all__ if getattr(envs, name, None) is None]
    assert missing == []
    assert set(envs.__all__) <= set(dir(envs))
