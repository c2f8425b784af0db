"""Registered environments served over HTTP (``agentenvs serve``); the client is
:mod:`agentenvs.envs.remote`. See docs/env-servers.md."""
