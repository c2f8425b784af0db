"""Environments on env servers (``agentenvs serve``) behind the in-process interface:
:class:`RemoteDataset` gives the builders, :class:`RemoteEnv` the episodes."""

from agentenvs.envs.remote.builder import RemoteDataset, RemoteGroupBuilder, server_urls
from agentenvs.envs.remote.client import (
    RemoteEnvError,
    RemoteTransientError,
    ServerUnavailable,
    SessionLost,
)
from agentenvs.envs.remote.env import RemoteEnv

__all__ = [
    "RemoteDataset",
    "RemoteEnv",
    "RemoteEnvError",
    "RemoteGroupBuilder",
    "RemoteTransientError",
    "ServerUnavailable",
    "SessionLost",
    "server_urls",
]
