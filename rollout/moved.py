"""The module paths of version one, kept working after ``rollout/`` moved into rooms by stage.

Users wrote ``from agentenvs.rollout.collector import collect`` and the like (the README
and examples of version one did); those imports must keep working. Each old name is
an alias of the module at its new home (the same module object, not a copy), so
``agentenvs.rollout.collector.collect is agentenvs.rollout.collect.collector.collect``.
New code imports from the new homes; the table is the whole mechanism.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

MOVED: dict[str, str] = {
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
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at its new home is already imported."""


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Resolves an old module path to the module at its new home."""

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new))


def install() -> None:
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
