"""The ``local`` sandbox backend: bubblewrap + warm, pre-imported, forking interpreters."""

from agentenvs.sandbox.local.backend import LocalSandbox, LocalSession

__all__ = ["LocalSandbox", "LocalSession"]
