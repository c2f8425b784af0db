"""Environment discovery through the ``agentenvs.envs`` entry-point group.

The flagships register exactly the way a third-party package does, in its own
``pyproject.toml``::

    [project.entry-points."agentenvs.envs"]
    my_task = "my_package.my_module:MyTaskConfig"

where ``MyTaskConfig`` subclasses :class:`agentenvs.envs.config.EnvConfig`.

An environment's module is imported only when it is asked for: :func:`env_names`
reads the entry-point metadata alone, :func:`make` and :func:`config_class` load the
one named, :func:`list_envs` (which needs each config's docstring) loads them all.
What ``agentenvs list`` shows comes from :mod:`agentenvs.envs.catalogue` instead,
which describes the shipped environments without importing them.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from agentenvs.envs.catalogue import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from agentenvs.envs.catalogue import ENVIRONMENTS as ENVIRONMENTS
from agentenvs.envs.catalogue import GYM_NAMESPACE as GYM_NAMESPACE
from agentenvs.envs.catalogue import UnknownEnvError as UnknownEnvError
from agentenvs.envs.catalogue import gym_id_for, load_config_class
from agentenvs.envs.config import EnvConfig
from agentenvs.envs.errors import AgentEnvsError

GYM_ENTRY_POINT = "agentenvs.envs.gym_adapter:TextGymEnv"

logger = logging.getLogger(__name__)


class EnvConfigError(AgentEnvsError, ValueError):
    """A configuration the environment does not accept; the message names the keys."""


@dataclass(frozen=True)
class EnvInfo:
    name: str
    gym_id: str
    target: str
    description: str


def env_names() -> list[str]:
    """The registered environments' names, from the entry-point metadata (nothing loads)."""
    return ENVIRONMENTS.names()


def config_class(name: str) -> type[EnvConfig]:
    _register_if_gymnasium_loaded()
    return load_config_class(name)


def make(name: str, **config: Any) -> EnvConfig:
    """The validated configuration of a registered environment.

    ``make("retool", renderer="chat").dataset(tokenizer, group_size=8)`` gives the
    groups a collector or trainer runs.
    """
    cls = config_class(name)
    try:
        return cls(**config)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<config>'}: {e['msg']}" for e in err.errors()
        )
        # The keys of the level that was wrong: `limits.bogus` lists the fields of limits.
        first = err.errors()[0]["loc"] if err.errors() else ()
        level, model = _level_of(cls, tuple(first[:-1]))
        fields = ", ".join(sorted(model.model_fields))
        where = f"Accepted keys under {level}" if level else "Accepted keys"
        raise EnvConfigError(f"bad config for {name!r}: {problems}. {where}: {fields}") from None


def _level_of(cls: type[BaseModel], path: tuple[Any, ...]) -> tuple[str, type[BaseModel]]:
    """The deepest model along ``path`` (field names) and its dotted name."""
    model, walked = cls, []
    for part in path:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            break
        model = annotation
        walked.append(str(part))
    return ".".join(walked), model


def list_envs() -> list[EnvInfo]:
    """Every loadable environment with its gym id and description (loads every config)."""
    _register_if_gymnasium_loaded()
    return _load_all()


def _load_all() -> list[EnvInfo]:
    infos = []
    for name, reference in ENVIRONMENTS.references().items():
        try:
            cls = load_config_class(name)
        except Exception as err:  # a broken plugin must not hide the others
            logger.warning("environment %r could not be loaded: %s", name, err)
            continue
        doc = (cls.__doc__ or "").strip().splitlines()
        infos.append(EnvInfo(name, gym_id_for(name, cls), reference, doc[0] if doc else ""))
    return infos


def register_gymnasium() -> list[str]:
    """Register ``agentenvs/<Name>-v0`` gymnasium ids for every registered environment."""
    import gymnasium

    registered = []
    for info in _load_all():
        if info.gym_id not in gymnasium.registry:
            gymnasium.register(
                id=info.gym_id, entry_point=GYM_ENTRY_POINT, kwargs={"env_name": info.name}
            )
        registered.append(info.gym_id)
    _registered_with.add(frozenset(ENVIRONMENTS.names()))
    return registered


_registered_with: set[frozenset[str]] = set()
"""The sets of entry-point names gym ids were registered for (a plugin installed
later in the process adds a name, and its id is registered on the next lookup)."""


def _register_if_gymnasium_loaded() -> None:
    """Gym ids for a process that uses gymnasium, without importing it for one that does not."""
    names = frozenset(ENVIRONMENTS.names())
    if "gymnasium" in sys.modules and names not in _registered_with:
        _registered_with.add(names)  # a failure is reported once, not on every lookup
        register_gymnasium_quietly()


def register_gymnasium_quietly() -> None:
    """:func:`register_gymnasium` as a convenience: a failure is logged, never raised."""
    try:
        register_gymnasium()
    except Exception as err:
        logger.warning("gymnasium registration failed: %s", err)
