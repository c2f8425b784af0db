"""Synchronous entry points of the sandbox package: factory, capability report, CLI.

The report and the CLI start a real local worker (skipped only where the machine
cannot run one: ``support.machine_skips.LOCAL_SANDBOX``).
"""

from __future__ import annotations

import ast
import sys

import pytest
from pydantic import ValidationError
from support import machine_skips
from typer.testing import CliRunner

from agentenvs.sandbox import SandboxConfig, capability_report, create
from agentenvs.sandbox.backends.local.backend import LocalSandbox
from agentenvs.sandbox.factory import BACKENDS, merged_config
from agentenvs.sandbox.pool.protocol import supervisor_source

needs_sandbox = machine_skips.needs(*machine_skips.LOCAL_SANDBOX)


@needs_sandbox
def test_capability_report_and_cli_from_sync_code():
    report = capability_report(min_isolation=["namespaces", "no_such_layer"])
    assert report["backend"] == "local"
    assert report["missing"] == ["no_such_layer"]
    from agentenvs.sandbox.cli import app

    runner = CliRunner()
    ok = runner.invoke(app, ["capabilities", "--json", "--require", "namespaces"])
    assert ok.exit_code == 0, ok.output
    missing = runner.invoke(app, ["capabilities", "--require", "no_such_layer"])
    assert missing.exit_code == 1


# ---------------------------------------------------------------------------- factory & source


def test_factory_merges_overrides_and_validates():
    sb = create(timeout=5, pool_size=3)
    assert isinstance(sb, LocalSandbox)
    assert sb.config.timeout == 5 and sb.config.pool_size == 3
    base = SandboxConfig(memory_limit_mb=128)
    assert merged_config(base, timeout=2).memory_limit_mb == 128
    with pytest.raises(ValidationError):
        create(no_such_field=1)
    with pytest.raises(ValidationError):
        create(backend="bogus")
    assert set(BACKENDS.names()) == {"local", "docker", "sandboxfusion"}


def test_supervisor_is_standalone_stdlib_only():
    tree = ast.parse(supervisor_source())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported
