"""What an environment needs installed beyond agentenvs' core, and the line that installs it.

An environment declares the modules its episodes import on :class:`EnvConfig`
(``requires``, and ``requirements()`` where a setting changes them: Search-R1's ``http``
retriever needs no index library). Each :class:`Requirement` names a top-level module
and what brings it (``agentenvs[retool]`` for an extra of ours, ``my-package[gpu]`` for
a plugin's own). Finding one missing imports nothing: :func:`importlib.util.find_spec`
only looks, so ``agentenvs list`` can say what is missing without loading anything, and
``agentenvs rollout`` refuses before it collects a group that could only fail.

This module imports nothing of the library but the error root (a card of a shipped
environment, :mod:`agentenvs.envs.catalogue`, holds requirements too).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass

from agentenvs.envs.errors import AgentEnvsError


@dataclass(frozen=True)
class Requirement:
    """A top-level module an environment imports, and what installs it."""

    module: str
    """The import name (``math_verify``, ``Stemmer``), not the distribution's name."""
    install: str
    """What ``pip install`` takes to bring it: ``agentenvs[retool]``, ``my-package[x]``."""

    def installed(self) -> bool:
        """Whether the module can be found (it is not imported)."""
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):  # a parent that fails to import; a None in sys.modules
            return False


def extra(name: str, *modules: str) -> tuple[Requirement, ...]:
    """``modules``, each brought by agentenvs' extra ``name`` (``pip install 'agentenvs[name]'``)."""
    return tuple(Requirement(module, f"agentenvs[{name}]") for module in modules)


def missing(requirements: Iterable[Requirement]) -> list[Requirement]:
    """The requirements whose module cannot be found, in order."""
    return [r for r in requirements if not r.installed()]


def install_line(requirements: Iterable[Requirement]) -> str:
    """``pip install 'agentenvs[retool]' 'agentenvs[docker]'``: each install once, in order."""
    installs = list(dict.fromkeys(r.install for r in requirements))
    return "pip install " + " ".join(f"'{i}'" for i in installs)


def missing_message(env_name: str, gone: list[Requirement]) -> str:
    """One line saying what ``env_name`` lacks and the command that brings it."""
    modules = ", ".join(r.module for r in gone)
    verb = "is" if len(gone) == 1 else "are"
    return f"environment {env_name!r} needs {modules}, which {verb} not installed: " + install_line(
        gone
    )


class MissingRequirements(AgentEnvsError, ModuleNotFoundError):
    """An environment's declared modules are not installed; the message says which and
    the ``pip install`` line that brings them."""

    def __init__(self, env_name: str, gone: list[Requirement]) -> None:
        super().__init__(missing_message(env_name, gone))
        self.env_name = env_name
        self.missing = list(gone)


def check_installed(env_name: str, requirements: Iterable[Requirement]) -> None:
    """Raise :class:`MissingRequirements` when any of ``requirements`` is missing."""
    gone = missing(requirements)
    if gone:
        raise MissingRequirements(env_name, gone)
