"""agentenvs.envs: the multi-turn environment interface, the registry and the environments.

This face is lazy: each name below is imported from its module the first time it is
read, so ``import agentenvs.envs`` (or ``agentenvs.envs.types``) loads no environment,
no sandbox and not gymnasium. The registry loads an environment when it is asked for
one (:func:`make`, :func:`config_class`) or for all of them (:func:`list_envs`).

Gymnasium ids (``agentenvs/GuessNumber-v0``, ...) are registered when gymnasium is
already imported as this package loads (``import gymnasium, agentenvs.envs``), on the
registry's first lookup once gymnasium is loaded, or by :func:`register_gymnasium`.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    # the token-level interface
    "Action": "types",
    "ActionExtra": "types",
    "Env": "types",
    "EnvGroupBuilder": "types",
    "ForkUnsupported": "types",
    "GroupDescription": "types",
    "ListDataset": "types",
    "Metrics": "types",
    "Observation": "types",
    "RLDataset": "types",
    "RunsOwnGroup": "types",
    "SamplerStopReason": "types",
    "ScriptedActions": "types",
    "StepResult": "types",
    "StopCondition": "types",
    "StopReason": "types",
    "TokensWithLogprobs": "types",
    "Trajectory": "types",
    "TrajectoryGroup": "types",
    "Transition": "types",
    "AgentEnvsError": "errors",
    "TransientError": "errors",
    # the text layer, rendering and limits
    "Message": "text",
    "TextEnv": "text",
    "TextStep": "text",
    "Limits": "rendered_env",
    "RenderedEnv": "rendered_env",
    "ChatRenderer": "renderers",
    "ContinuationRenderer": "renderers",
    "Renderer": "renderers",
    "make_renderer": "renderers",
    # configs and the registry
    "EnvConfig": "config",
    "TextGroupBuilder": "config",
    "EnvConfigError": "registry",
    "EnvInfo": "registry",
    "UnknownEnvError": "registry",
    "config_class": "registry",
    "env_names": "registry",
    "list_envs": "registry",
    "make": "registry",
    "register_gymnasium": "registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next read skips this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:  # what type checkers and IDEs see; nothing of this runs
    from agentenvs.envs.config import EnvConfig, TextGroupBuilder  # noqa: F401
    from agentenvs.envs.errors import AgentEnvsError  # noqa: F401
    from agentenvs.envs.registry import (  # noqa: F401
        EnvConfigError,
        EnvInfo,
        UnknownEnvError,
        config_class,
        env_names,
        list_envs,
        make,
        register_gymnasium,
    )
    from agentenvs.envs.rendered_env import Limits, RenderedEnv  # noqa: F401
    from agentenvs.envs.renderers import ChatRenderer, ContinuationRenderer, Renderer, make_renderer  # noqa: F401
    from agentenvs.envs.text import Message, TextEnv, TextStep  # noqa: F401
    from agentenvs.envs.types import (  # noqa: F401
        Action,
        ActionExtra,
        Env,
        EnvGroupBuilder,
        ForkUnsupported,
        GroupDescription,
        ListDataset,
        Metrics,
        Observation,
        RLDataset,
        RunsOwnGroup,
        SamplerStopReason,
        ScriptedActions,
        StepResult,
        StopCondition,
        StopReason,
        TokensWithLogprobs,
        Trajectory,
        TrajectoryGroup,
        Transition,
    )

if "gymnasium" in sys.modules:  # a gymnasium user imported it first: give it the ids now
    importlib.import_module(f"{__name__}.registry").register_gymnasium_quietly()
