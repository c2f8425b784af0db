"""Environment discovery through the ``agentenvs.envs`` entry-point group.

The flagships register exactly the way a third-party package does, in its own
``pyproject.toml``::

    [project.entry-points."agentenvs.envs"]
    my_task = "my_package.my_module:MyTaskConfig"

where ``MyTaskConfig`` subclasses :class:`agentenvs.envs.config.EnvConfig`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic import ValidationError

from agentenvs.envs.config import EnvConfig

ENTRY_POINT_GROUP = "agentenvs.envs"
GYM_NAMESPACE = "agentenvs"

logger = logging.getLogger(__name__)


class UnknownEnvError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class EnvConfigError(ValueError):
    """A configuration the environment does not accept; the message names the keys."""


@dataclass(frozen=True)
class EnvInfo:
    name: str
    gym_id: str
    target: str
    description: str


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def config_class(name: str) -> type[EnvConfig]:
    points = _entry_points()
    if name not in points:
        known = ", ".join(sorted(points)) or "none"
        raise UnknownEnvError(f"unknown environment {name!r}; registered: {known}")
    cls = points[name].load()
    if not (isinstance(cls, type) and issubclass(cls, EnvConfig)):
        raise TypeError(
            f"entry point {name!r} ({points[name].value}) must name an EnvConfig subclass"
        )
    return cls


def gym_id_for(name: str, cls: type[EnvConfig]) -> str:
    stem = cls.gym_name or "".join(part.capitalize() for part in name.split("_"))
    return f"{GYM_NAMESPACE}/{stem}-v{cls.version}"


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
        fields = ", ".join(sorted(cls.model_fields))
        raise EnvConfigError(
            f"bad config for {name!r}: {problems}. Accepted keys: {fields}"
        ) from None


def list_envs() -> list[EnvInfo]:
    infos = []
    for name, point in sorted(_entry_points().items()):
        try:
            cls = config_class(name)
        except Exception as err:  # a broken plugin must not hide the others
            logger.warning("environment %r could not be loaded: %s", name, err)
            continue
        doc = (cls.__doc__ or "").strip().splitlines()
        infos.append(EnvInfo(name, gym_id_for(name, cls), point.value, doc[0] if doc else ""))
    return infos


def register_gymnasium() -> list[str]:
    """Register ``agentenvs/<Name>-v0`` gymnasium ids for every registered environment."""
    import gymnasium

    registered = []
    for info in list_envs():
        if info.gym_id not in gymnasium.registry:
            gymnasium.register(
                id=info.gym_id,
                entry_point="agentenvs.envs.gym_adapter:TextGymEnv",
                kwargs={"env_name": info.name},
            )
        registered.append(info.gym_id)
    return registered
