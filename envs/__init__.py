"""agentenvs.envs: the multi-turn environment interface, the registry and the environments."""

from agentenvs.envs.config import EnvConfig, TextGroupBuilder
from agentenvs.envs.registry import (
    EnvConfigError,
    EnvInfo,
    UnknownEnvError,
    config_class,
    list_envs,
    make,
    register_gymnasium,
)
from agentenvs.envs.rendered import Limits, RenderedEnv
from agentenvs.envs.renderers import ChatRenderer, ContinuationRenderer, Renderer, make_renderer
from agentenvs.envs.text import Message, TextEnv, TextStep
from agentenvs.envs.types import (
    Action,
    ActionExtra,
    Env,
    EnvGroupBuilder,
    ListDataset,
    Metrics,
    Observation,
    RLDataset,
    SamplerStopReason,
    StepResult,
    StopCondition,
    StopReason,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
)

__all__ = [
    "Action",
    "ActionExtra",
    "ChatRenderer",
    "ContinuationRenderer",
    "Env",
    "EnvConfig",
    "EnvConfigError",
    "EnvGroupBuilder",
    "EnvInfo",
    "Limits",
    "ListDataset",
    "Message",
    "Metrics",
    "Observation",
    "RLDataset",
    "RenderedEnv",
    "Renderer",
    "SamplerStopReason",
    "StepResult",
    "StopCondition",
    "StopReason",
    "TextEnv",
    "TextGroupBuilder",
    "TextStep",
    "TokensWithLogprobs",
    "Trajectory",
    "TrajectoryGroup",
    "Transition",
    "UnknownEnvError",
    "config_class",
    "list_envs",
    "make",
    "make_renderer",
    "register_gymnasium",
]

try:
    register_gymnasium()
except Exception as _err:  # registration is a convenience; never break the import
    import logging

    logging.getLogger(__name__).warning("gymnasium registration failed: %s", _err)
