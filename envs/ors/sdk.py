"""Importing the ``openreward`` SDK quietly and offline.

The SDK logs every request at INFO through its own structlog loggers, whose level is
read from ``OPENREWARD_LOG_LEVEL`` when its modules are imported, and its client and
server start a thread that asks PyPI for a newer version unless
``OPENREWARD_DISABLE_UPDATE_CHECK`` is set. An env server or a rollout wants neither,
so both get a default here (a value the user set is kept) before the SDK loads.
"""

from __future__ import annotations

import os
from types import ModuleType

from agentenvs.envs.errors import AgentEnvsError


class ORSUnavailable(AgentEnvsError, ImportError):
    """The ``openreward`` SDK is not installed (or does not import)."""


def load_sdk() -> ModuleType:
    """``openreward.environments`` (the server half), imported quietly."""
    os.environ.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")
    os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    try:
        import openreward.environments as environments
    except ImportError as err:
        raise ORSUnavailable(
            f"the openreward SDK is not available ({err}); `make install` installs it "
            "(pip install --no-deps openreward==0.1.167 beside the `ors` extra)"
        ) from err
    return environments
