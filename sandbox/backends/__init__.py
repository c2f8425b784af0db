"""The sandbox backends, one room each; :mod:`agentenvs.sandbox.factory` picks one by name.

- ``local/``: bubblewrap + warm, pre-imported, forking interpreters on this machine.
- ``docker/``: warm containers through the Docker API (Docker or podman).
- ``sandboxfusion``: an HTTP client for a SandboxFusion (or ``agentenvs sandbox serve``) server.
"""
