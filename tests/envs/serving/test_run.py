"""Starting an env server: the exposure rule, the names it hosts, the ``agentenvs
serve`` command's refusals, and OpenEnv's wire mounted beside ours (driven by
OpenEnv's own client)."""

from __future__ import annotations

import socket

import httpx
import pytest
from support.env_servers import thread_server
from typer.testing import CliRunner

from agentenvs.envs.registry import UnknownEnvError
from agentenvs.envs.serving.run import ServeError, build_app, check_exposure, is_loopback
from agentenvs.rollout.cli import app as cli
from agentenvs.rollout.tokenizer import load_tokenizer


def test_only_loopback_may_go_without_a_token() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5")
    assert not is_loopback("envs.internal")  # a name may resolve anywhere
    check_exposure("127.0.0.1", None)
    check_exposure("0.0.0.0", "t0ken")
    with pytest.raises(ServeError, match="--token"):
        check_exposure("0.0.0.0", None)


def test_the_serve_command_refuses_what_it_cannot_serve_safely() -> None:
    open_port = CliRunner().invoke(cli, ["serve", "guess_number", "--host", "0.0.0.0"])
    assert open_port.exit_code == 2 and "--token" in open_port.output
    unknown = CliRunner().invoke(cli, ["serve", "guess_numbr"])
    assert unknown.exit_code == 2 and "did you mean 'guess_number'" in unknown.output
    limits = CliRunner().invoke(cli, ["serve", "guess_number", "--max-groups", "0"])
    assert limits.exit_code == 2 and "max_groups" in limits.output
    with pytest.raises(UnknownEnvError):
        build_app(["nope"], None)
    for refused in (open_port, unknown, limits):
        assert refused.output.startswith("error: "), refused.output


def test_a_port_in_use_is_one_error_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = CliRunner().invoke(cli, ["serve", "guess_number", "--port", str(port)])
    assert busy.exit_code == 2, busy.output
    assert busy.output.startswith(f"error: --port {port}: cannot listen"), busy.output


@pytest.mark.services
async def test_openenv_clients_drive_the_mounted_app_behind_the_token() -> None:
    from openenv.core.generic_client import GenericEnvClient

    app = build_app(["guess_number"], load_tokenizer("builtin"), openenv=True)
    with thread_server(app) as url:
        base = f"{url}/openenv/guess_number"
        async with GenericEnvClient(base_url=base) as client:
            first = await client.reset(task_index=2)
            assert first.observation["task_id"] == "train/2"
        assert httpx.get(f"{url}/v1/info").json()["envs"] == ["guess_number"]
    guarded = build_app(["guess_number"], load_tokenizer("builtin"), openenv=True, token="k")
    with thread_server(guarded) as url:
        assert httpx.get(f"{url}/openenv/guess_number/schema").status_code == 401
        with pytest.raises(Exception):  # noqa: B017 - the socket is closed before it opens
            async with GenericEnvClient(base_url=f"{url}/openenv/guess_number") as client:
                await client.reset(task_index=0)


def test_the_demo_leaves_out_envs_that_need_an_external_server() -> None:
    from agentenvs.rollout.cli.demo import default_demo_envs, needs_external_server
    from agentenvs.rollout.cli.listing import registered_envs

    rows = {row.name: row for row in registered_envs()}
    chosen = default_demo_envs(rows)
    assert needs_external_server("openenv") and needs_external_server("mcp_tools")
    assert not needs_external_server("guess_number")
    # servers or task dirs of someone else's; harness: the CLIs `make harnesses` installs and a model
    outside = {"openenv", "mcp_tools", "ors", "harbor", "harness"}
    assert all(needs_external_server(name) for name in outside)
    assert not outside & set(chosen)
    assert "guess_number" in chosen
    assert set(chosen) | outside == set(rows)
