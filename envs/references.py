"""Named things loaded only when asked for: one way to refer, load, list and describe them.

agentenvs keeps several string-keyed registries: environments (the ``agentenvs.envs`` entry
points), policies, sandbox backends, tool-call parsers, command groups. Each maps a name to
a *reference*, ``"package.module:attribute"`` (or ``"package.module"`` for a module), so the
thing it names is imported only when it is used: listing what exists must not import torch,
a sandbox backend or every environment.

* :func:`load_ref` turns a reference into the object (the one lazy loader);
* :class:`Registry` holds the names of one kind, from a table and/or an entry-point group,
  and answers :meth:`Registry.load`, :meth:`Registry.names` (imports nothing) and
  :meth:`Registry.describe` (imports each, and keeps going past one that fails);
* an unknown name is an :class:`UnknownNameError` that lists the known names and the
  closest ones ("did you mean").

This module is on the ground floor (``tests/test_layers.py``): every room can use it.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from agentenvs.envs.errors import AgentEnvsError


class UnknownNameError(AgentEnvsError, KeyError):
    """A name no registry entry has; the message lists the known names and the closest."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class BadReferenceError(AgentEnvsError, ValueError):
    """A reference that is not ``"module"`` or ``"module:attribute"``, or names nothing."""


def load_ref(reference: str) -> Any:
    """The object ``reference`` names: ``"pkg.mod"`` is the module, ``"pkg.mod:Name.attr"``
    an attribute path inside it. Import errors of the module propagate unchanged (a missing
    optional dependency stays a ``ModuleNotFoundError`` naming it)."""
    module_name, _, path = reference.partition(":")
    if not module_name or (":" in reference and not path):
        raise BadReferenceError(f"not a reference: {reference!r} (want 'module' or 'module:name')")
    value: Any = importlib.import_module(module_name)
    for part in path.split(".") if path else ():
        try:
            value = getattr(value, part)
        except AttributeError:
            raise BadReferenceError(f"{reference!r}: {module_name} has no {path!r}") from None
    return value


def did_you_mean(name: str, known: list[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest known names, or ``""``."""
    close = difflib.get_close_matches(name, known, n=2, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


@dataclass(frozen=True)
class Registered:
    """One entry as :meth:`Registry.describe` reports it."""

    name: str
    reference: str
    summary: str = ""
    """The first line of the loaded object's docstring."""
    problem: str | None = None
    """Why it could not be loaded (a missing extra, a broken plugin), else None."""

    @property
    def loadable(self) -> bool:
        return self.problem is None


class Registry:
    """Names of one ``kind`` (``"policy"``, ``"sandbox backend"``) mapped to references.

    ``table`` holds the built-in entries; ``entry_point_group`` adds those installed
    packages declare (read afresh on each lookup, so a plugin installed while the
    process runs is seen). A table entry wins over an entry point of the same name.
    ``unknown`` is the error an unknown name raises (a subclass of
    :class:`UnknownNameError` a room already documents, such as ``UnknownEnvError``).
    """

    def __init__(
        self,
        kind: str,
        table: Mapping[str, str] | None = None,
        *,
        entry_point_group: str | None = None,
        unknown: type[UnknownNameError] = UnknownNameError,
    ) -> None:
        self.kind = kind
        self._table = dict(table or {})
        self.entry_point_group = entry_point_group
        self._unknown = unknown

    def references(self) -> dict[str, str]:
        """Every name and its reference, sorted by name (imports nothing)."""
        found: dict[str, str] = {}
        if self.entry_point_group is not None:
            found.update({p.name: p.value for p in entry_points(group=self.entry_point_group)})
        found.update(self._table)
        return dict(sorted(found.items()))

    def names(self) -> list[str]:
        return list(self.references())

    def __contains__(self, name: object) -> bool:
        return name in self.references()

    def reference(self, name: str) -> str:
        """The reference of ``name``; :class:`UnknownNameError` names the choices."""
        references = self.references()
        if name not in references:
            known = list(references)
            raise self._unknown(
                f"unknown {self.kind} {name!r}{did_you_mean(name, known)}; "
                f"choose one of {', '.join(known) or 'none'}"
            )
        return references[name]

    def load(self, name: str) -> Any:
        """The object ``name`` refers to, imported now."""
        return load_ref(self.reference(name))

    def describe(self) -> list[Registered]:
        """Every entry with its docstring's first line; an entry that fails to load is
        reported with its problem instead of hiding the others."""
        described = []
        for name, reference in self.references().items():
            try:
                loaded = load_ref(reference)
            except Exception as error:  # a broken plugin must not hide the others
                problem = f"{type(error).__name__}: {error}".splitlines()[0]
                described.append(Registered(name, reference, problem=problem))
                continue
            doc = (loaded.__doc__ or "").strip().splitlines()
            described.append(Registered(name, reference, doc[0] if doc else ""))
        return described
