"""The sandbox's rooms: a lazy public face, one home per concept, one error root.

``agentenvs.sandbox`` holds only the interface; the in-sandbox kit is ``supervisor/``, the
host-side pool ``pool/``, the backends ``backends/`` and the HTTP server ``server/``. The
flat modules of before are gone (no alias: 0.x has no users to protect).
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from agentenvs.envs.errors import AgentEnvsError

OLD_MODULES = (
    "agentenvs.sandbox.local",
    "agentenvs.sandbox.local.supervisor",
    "agentenvs.sandbox.local.protocol",
    "agentenvs.sandbox.docker",
    "agentenvs.sandbox.sandboxfusion",
    "agentenvs.sandbox.supervised",
    "agentenvs.sandbox.supervised_session",
    "agentenvs.sandbox.pool_care",
    "agentenvs.sandbox.health",
    "agentenvs.sandbox.worker_errors",
    "agentenvs.sandbox.server_body",
    "agentenvs.sandbox.server_limits",
    "agentenvs.sandbox.server_request",
)

# Every sandbox error outside the in-sandbox kit: (module, class, the builtin base it keeps).
ERRORS = (
    ("agentenvs.sandbox.base", "SandboxUnavailable", RuntimeError),
    ("agentenvs.sandbox.base", "SessionForkError", RuntimeError),
    ("agentenvs.sandbox.pool.errors", "WorkerDead", RuntimeError),
    ("agentenvs.sandbox.pool.errors", "WorkerStartError", RuntimeError),
    ("agentenvs.sandbox.pool.protocol", "ProtocolError", RuntimeError),
    ("agentenvs.sandbox.backends.docker.attach", "AttachClosed", ConnectionError),
    ("agentenvs.sandbox.backends.docker.image", "ImageBuildError", RuntimeError),
    ("agentenvs.sandbox.backends.docker.podman", "PodmanUnavailable", RuntimeError),
)


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return set(out.split())


@pytest.mark.parametrize("old", OLD_MODULES)
def test_old_module_paths_are_gone(old: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_importing_the_face_loads_no_backend() -> None:
    loaded = _loaded_after("import agentenvs.sandbox")
    assert {m for m in loaded if m.startswith("agentenvs.")} == {"agentenvs.sandbox"}
    loaded = _loaded_after("from agentenvs.sandbox import create, SandboxConfig, ExecResult")
    assert not {
        m for m in loaded if m.startswith(("agentenvs.sandbox.backends", "agentenvs.sandbox.pool"))
    }
    assert "httpx" not in loaded and "docker" not in loaded


def test_every_public_name_resolves_to_its_defining_module() -> None:
    import agentenvs.sandbox as face

    for name in face.__all__:
        value = getattr(face, name)
        assert value is not None, name
    assert face.LocalSandbox.__module__ == "agentenvs.sandbox.backends.local.backend"
    with pytest.raises(AttributeError):
        face.no_such_name  # noqa: B018


@pytest.mark.parametrize(("module", "name", "builtin"), ERRORS)
def test_sandbox_errors_share_the_root_and_keep_their_builtin(
    module: str, name: str, builtin: type[BaseException]
) -> None:
    error = getattr(importlib.import_module(module), name)
    assert issubclass(error, AgentEnvsError) and issubclass(error, builtin)
