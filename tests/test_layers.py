"""Floors that only point down: no module imports a module of a higher floor.

The floors, from the ground up:

0. **ground**: the error root, the token-level contract and trajectory types, the
   trajectory wire format, the weights identity and the lazy registry helper. They import nothing of the project
   but each other, so every room can use them without loading another room.
1. **sandbox**: runs untrusted code; knows nothing of environments or rollouts.
2. **envs core**: the text layer, renderers, limits, registry, tool-call parsers, rewards.
3. **envs environments and serving**: the environments, and the servers and clients that
   carry them (MCP, OpenEnv, the env server and its remote client).
4. **rollout**: collection, data, trainers, weights, checks, the CLI.

Every import counts: module-level or inside a function (a lazy import is still a
dependency), and ``importlib.import_module("agentenvs....")`` with a literal name.
Only imports under ``if TYPE_CHECKING:`` are left out (they never run).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.paths import REPO

ROOTS = {"envs": "agentenvs.envs", "rollout": "agentenvs.rollout", "sandbox": "agentenvs.sandbox"}

GROUND = (
    "agentenvs.envs.errors",
    "agentenvs.envs.types",
    "agentenvs.envs.wire",
    "agentenvs.envs.weights_identity",
    "agentenvs.envs.references",
)
ENVIRONMENTS_AND_SERVING = (
    "guess_number",
    "search_r1",
    "retool",
    "alfworld",
    "openenv",
    "mcp",
    "remote",
    "serving",
    "ors",
    "harbor",
    "charts",
    "harness",
)
FLOOR_NAMES = ("ground", "sandbox", "envs core", "envs environments/serving", "rollout")


def floor_of(module: str) -> int:
    if module in GROUND:
        return 0
    parts = module.split(".")
    if parts[1] == "sandbox":
        return 1
    if parts[1] == "envs":
        return 3 if len(parts) > 2 and parts[2] in ENVIRONMENTS_AND_SERVING else 2
    return 4


@dataclass(frozen=True)
class Import:
    source: str
    path: Path
    line: int
    target: str


def _module_name(path: Path) -> str:
    relative = path.relative_to(REPO)
    parts = list(relative.with_suffix("").parts[1:])
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join([ROOTS[relative.parts[0]], *parts])


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    package = module.split(".") if is_package else module.split(".")[:-1]

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.extend((alias.name, node.lineno) for alias in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.level:
                base_parts = package[: len(package) - node.level + 1]
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            found.append((base, node.lineno))
            found.extend((f"{base}.{alias.name}", node.lineno) for alias in node.names)

        def visit_Call(self, node: ast.Call) -> None:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0] if node.args else None
            literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
            if name == "import_module" and literal:
                found.append((first.value, node.lineno))  # type: ignore[union-attr]
            self.generic_visit(node)

    Visitor().visit(tree)
    return found


def project_imports() -> list[Import]:
    files = [(p, _module_name(p)) for top in ROOTS for p in sorted((REPO / top).rglob("*.py"))]
    known = {module for _, module in files}

    def resolve(name: str) -> str:
        while name and name not in known:  # `from pkg import name` names a module or an attribute
            name = name.rpartition(".")[0]
        return name

    imports = []
    for path, module in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for name, line in _imported_names(tree, module, path.name == "__init__.py"):
            if not name.startswith("agentenvs."):
                continue
            target = resolve(name)
            if target and target != module:
                imports.append(Import(module, path, line, target))
    return imports


def upward(imports: list[Import]) -> list[str]:
    return sorted(
        {
            f"{i.path.relative_to(REPO)}:{i.line} ({FLOOR_NAMES[floor_of(i.source)]}) imports "
            f"{i.target} ({FLOOR_NAMES[floor_of(i.target)]})"
            for i in imports
            if floor_of(i.target) > floor_of(i.source)
        }
    )


def test_no_module_imports_a_higher_floor() -> None:
    imports = project_imports()
    assert len(imports) > 500  # the scan read the tree
    assert upward(imports) == []


def test_the_scan_sees_an_upward_import_wherever_it_is_written(tmp_path: Path) -> None:
    """The check itself: a lazy import inside a function and an ``import_module`` call are
    found; an import under ``if TYPE_CHECKING:`` is not (it never runs)."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "import importlib\n"
        "if TYPE_CHECKING:\n"
        "    from agentenvs.rollout.collect import records\n"
        "def f():\n"
        "    from agentenvs.rollout.collect.records import GroupRecord\n"
        "    return importlib.import_module('agentenvs.envs.config')\n"
    )
    names = _imported_names(ast.parse(source), "agentenvs.sandbox.base", is_package=False)
    targets = {name for name, _ in names}
    assert "agentenvs.rollout.collect.records.GroupRecord" in targets
    assert "agentenvs.envs.config" in targets
    assert not any(line == 4 for _, line in names)
    fake = [
        Import("agentenvs.sandbox.base", REPO / "sandbox" / "base.py", 6, "agentenvs.envs.config"),
        Import("agentenvs.envs.errors", REPO / "envs" / "errors.py", 1, "agentenvs.envs.config"),
        Import("agentenvs.envs.retool.env", REPO / "envs" / "retool" / "env.py", 1,
               "agentenvs.sandbox.base"),
    ]  # fmt: skip
    found = upward(fake)
    assert len(found) == 2
    assert "sandbox/base.py:6 (sandbox) imports agentenvs.envs.config (envs core)" in found[1]


@pytest.mark.parametrize("module", GROUND)
def test_a_ground_floor_module_loads_no_other_room(module: str) -> None:
    """Imported alone in a fresh interpreter, a ground module brings in only other ground
    modules and the packages' faces (``__init__`` files that load nothing themselves)."""
    script = (
        f"import sys, {module}\n"
        "print('\\n'.join(m for m in sys.modules if m.startswith('agentenvs.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    assert set(loaded) <= {*GROUND, "agentenvs.envs"}, loaded
