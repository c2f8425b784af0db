"""Which code computed a reward: each reward component names its function and version.

Step metrics already carry a reward's parts (``correct``, ``em``, ``judge/score``), but
not *how* they were computed: after an edit to a grader, two runs' rewards can differ
for reasons no record shows. A :class:`RewardIdentity` names a component, the function
that computes it, a version its author bumps on purpose, and a hash of the code.

Why a code hash beside the version: authors forget to bump versions. The hash is taken
over the function's syntax tree with docstrings and decorators left out (and over the
helpers it names in ``depends``), so reformatting, comments and doc edits leave it
unchanged while any change to what the code does changes it. A version bump says "I
meant to change the reward"; a hash change with the same version says "someone changed
it and did not say so". ``agentenvs check`` reports both (``rollout/inspect/reward_checks.py``).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import inspect
import json
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

IDENTITY_ATTRIBUTE = "__reward_identity__"


@dataclass(frozen=True)
class RewardIdentity:
    """One reward component as the record names it."""

    name: str
    """What the component is called in this environment (``correct``, ``judge``)."""
    function: str
    """``module:qualname`` of the code that computes it."""
    version: str
    """Bumped by hand when the reward's meaning changes."""
    code_sha256: str = ""
    """16 hex digits over the normalised syntax tree of the function and its helpers."""
    packages: dict[str, str] = field(default_factory=dict)
    """Versions of the libraries the component relies on (``math-verify``)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """What else decides the value and is not in the env config (a judge's model,
    prompt hash and weights)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RewardIdentity:
        return cls(
            name=str(data.get("name", "")),
            function=str(data.get("function", "")),
            version=str(data.get("version", "")),
            code_sha256=str(data.get("code_sha256", "")),
            packages=dict(data.get("packages") or {}),
            settings=dict(data.get("settings") or {}),
        )

    def differences(self, other: RewardIdentity) -> list[str]:
        """``"version: 1 -> 2"`` per field that differs, ``other`` being the later one."""
        found = []
        for key in ("function", "version", "code_sha256", "packages", "settings"):
            before, after = getattr(self, key), getattr(other, key)
            if before != after:
                found.append(f"{key}: {_short(before)} -> {_short(after)}")
        return found


def _short(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def code_hash(*functions: Callable[..., Any]) -> str:
    """sha256 (16 hex digits) over each function's syntax tree, docstrings and
    decorators removed; a function whose source cannot be read hashes its qualname."""
    digest = hashlib.sha256()
    for function in functions:
        digest.update(_normalised_source(inspect.unwrap(function)).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _normalised_source(function: Callable[..., Any]) -> str:
    try:
        source = textwrap.dedent(inspect.getsource(function))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return qualified_name(function)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            node.decorator_list = []
            if _docstring(node.body):
                node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def _docstring(body: list[ast.stmt]) -> bool:
    first = body[0] if body else None
    return (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )


def qualified_name(function: Callable[..., Any]) -> str:
    return f"{function.__module__}:{function.__qualname__}"


def package_versions(names: Sequence[str]) -> dict[str, str]:
    """Installed versions of ``names`` (``"not installed"`` for one that is missing)."""
    found = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def identify(
    function: Callable[..., Any],
    name: str,
    version: str,
    *,
    depends: Sequence[Callable[..., Any]] = (),
    packages: Sequence[str] = (),
    settings: Mapping[str, Any] | None = None,
) -> RewardIdentity:
    """The identity of ``function`` as component ``name`` (for code not decorated,
    such as a method of an env class that computes its reward inline)."""
    return RewardIdentity(
        name=name,
        function=qualified_name(function),
        version=str(version),
        code_sha256=code_hash(function, *depends),
        packages=package_versions(packages),
        settings=dict(settings or {}),
    )


def reward_function(
    name: str,
    version: str,
    *,
    depends: Sequence[Callable[..., Any]] = (),
    packages: Sequence[str] = (),
) -> Callable[[F], F]:
    """Stamp a reward function with its component name and version.

    The function itself is returned unchanged (no wrapper, no call overhead); its
    identity is worked out when first asked for (:func:`identity_of`)."""

    def stamp(function: F) -> F:
        setattr(function, IDENTITY_ATTRIBUTE, (name, str(version), tuple(depends), tuple(packages)))
        return function

    return stamp


def identity_of(function: Callable[..., Any]) -> RewardIdentity:
    """The identity a :func:`reward_function` stamp declares; refuses an unstamped function."""
    stamp = getattr(function, IDENTITY_ATTRIBUTE, None)
    if stamp is None:
        raise TypeError(
            f"{qualified_name(function)} has no reward identity: decorate it with "
            "@reward_function(name, version)"
        )
    name, version, depends, packages = stamp
    return identify(function, name, version, depends=depends, packages=packages)


# ---------------------------------------------------------------------- per environment


def reward_components(env_name: str, config: Mapping[str, Any]) -> list[RewardIdentity]:
    """The reward components the registered environment ``env_name`` declares under this
    config (its :meth:`EnvConfig.reward_components <agentenvs.envs.config.EnvConfig.reward_components>`);
    none for an environment that is not registered here, whose extra is not installed,
    or whose config no longer validates."""
    key = json.dumps(dict(config), sort_keys=True, default=str)
    return list(_cached_components(env_name, key))


@functools.lru_cache(maxsize=64)
def _cached_components(env_name: str, config_json: str) -> tuple[RewardIdentity, ...]:
    """Memoised: every record of a run asks, and hashing source takes a moment."""
    from pydantic import ValidationError

    from agentenvs.envs.registry import UnknownEnvError, config_class

    try:
        config = config_class(env_name).model_validate(json.loads(config_json))
    except (UnknownEnvError, ImportError, ValidationError):
        return ()
    return tuple(config.reward_components())


REWARD_PROVENANCE_KEY = "reward"
"""Where a record's provenance holds its reward components."""


def with_reward_provenance(
    provenance: dict[str, Any], env_name: str, config: Mapping[str, Any]
) -> dict[str, Any]:
    """``provenance`` with ``reward.components`` set for this env and config (unchanged
    when the environment declares none, or when the caller already set them)."""
    if REWARD_PROVENANCE_KEY in provenance:
        return provenance
    components = reward_components(env_name, config)
    if not components:
        return provenance
    entry = {"components": [c.to_json() for c in components]}
    return {**provenance, REWARD_PROVENANCE_KEY: entry}


def recorded_components(provenance: Mapping[str, Any]) -> list[RewardIdentity]:
    """The reward components a stored record names (none for an older record)."""
    entry = provenance.get(REWARD_PROVENANCE_KEY) or {}
    return [RewardIdentity.from_json(c) for c in entry.get("components", [])]
