"""The ``agentenvs.rollout`` face: the names the README uses, exported lazily."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest
from support.paths import REPO

import agentenvs.rollout as rollout


def test_every_export_resolves_to_the_object_at_its_home() -> None:
    assert sorted(rollout.__all__) == sorted(rollout._EXPORTS)
    for name, module_name in rollout._EXPORTS.items():
        assert getattr(rollout, name) is getattr(importlib.import_module(module_name), name)


def test_no_export_is_shadowed_by_a_room() -> None:
    """A name equal to a subpackage or module of ``agentenvs.rollout`` would be replaced by
    that module as soon as it is imported (``collect`` is the collect room, not the function)."""
    rooms = {p.stem for p in (REPO / "rollout").iterdir() if p.suffix == ".py" or p.is_dir()}
    assert not rooms & set(rollout._EXPORTS)


def test_importing_the_face_loads_no_stage() -> None:
    """``import agentenvs.rollout`` must stay cheap: no collector, no torch, no trainer."""
    code = "import sys, agentenvs.rollout; print(sorted(m for m in sys.modules if m.startswith('agentenvs')))"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "['agentenvs', 'agentenvs.rollout']"


def test_one_name_loads_only_its_module() -> None:
    code = (
        "import sys; from agentenvs.rollout import to_tinker_datums; "
        "print('agentenvs.rollout.collect.collector' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.split() == ["False", "False"]


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        rollout.no_such_name  # noqa: B018


def test_readme_rollout_imports_name_real_objects() -> None:
    """Every ``from agentenvs.rollout... import X`` in the README and docs names an existing object."""
    texts = [(REPO / "README.md").read_text(encoding="utf-8")]
    texts += [p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").glob("*.md"))]
    pattern = re.compile(r"from (agentenvs\.rollout[\w.]*) import \(?([\w, \n]+?)\)?\n(?!\s)")
    found = 0
    for text in texts:
        for module_name, names in pattern.findall(text):
            module = importlib.import_module(module_name)
            for name in re.findall(r"\w+", names):
                if name == "as":
                    break
                assert hasattr(module, name), f"{module_name}.{name}"
                found += 1
    assert found >= 10
