"""The server's limits are ceilings: a request may lower them, never raise them (issue #11,
class 5). A request asking more gets the server's limit and the answer says so in
``agentenvs.clamped``; each test runs a program that would behave differently had the
request's own value been applied.
"""

from __future__ import annotations

from support.sandbox_server_helpers import ServerProcess, module_server, run_python

SERVER_TIMEOUT = 3
SERVER_MEMORY_MB = 256
SERVE_ARGS = (
    "--backend", "local", "--pool-size", "1",
    "--timeout", str(SERVER_TIMEOUT), "--memory-mb", str(SERVER_MEMORY_MB),
)  # fmt: skip


server = module_server(*SERVE_ARGS, backends=("local", "docker"))


def allocate(mb: int) -> str:
    return f"x = bytearray({mb} * 1024**2)\nprint('allocated')"


def test_memory_above_the_server_is_clamped(server: ServerProcess) -> None:
    asked = run_python(server, allocate(600), memory_limit_MB=3000)
    assert asked["status"] == "Failed" and "MemoryError" in asked["run_result"]["stderr"], asked
    assert asked["agentenvs"]["clamped"]["memory_limit_MB"] == {
        "requested": 3000,
        "applied": SERVER_MEMORY_MB,
    }


def test_memory_below_the_server_is_applied(server: ServerProcess) -> None:
    fits = run_python(server, allocate(100))
    assert fits["status"] == "Success" and fits["agentenvs"]["clamped"] == {}, fits
    lowered = run_python(server, allocate(100), memory_limit_MB=64)
    assert lowered["status"] == "Failed" and "MemoryError" in lowered["run_result"]["stderr"]
    assert lowered["agentenvs"]["clamped"] == {}


def test_run_timeout_above_the_server_is_clamped(server: ServerProcess) -> None:
    slept = run_python(
        server, "import time\ntime.sleep(8)\nprint('woke')", run_timeout=3600, compile_timeout=3600
    )
    assert slept["run_result"]["status"] == "TimeLimitExceeded", slept
    assert "woke" not in slept["run_result"]["stdout"]
    clamped = slept["agentenvs"]["clamped"]
    assert clamped["run_timeout"] == {"requested": 3600, "applied": SERVER_TIMEOUT}
    assert clamped["compile_timeout"] == {"requested": 3600, "applied": SERVER_TIMEOUT}


def test_run_timeout_below_the_server_is_applied(server: ServerProcess) -> None:
    quick = run_python(server, "import time\ntime.sleep(2)\nprint('woke')", run_timeout=0.5)
    assert quick["run_result"]["status"] == "TimeLimitExceeded" and "woke" not in str(quick)
    assert (
        run_python(server, "import time\ntime.sleep(0.2)\nprint('woke')", run_timeout=2)[
            "run_result"
        ]["stdout"]
        == "woke\n"
    )


def test_output_cap_can_be_lowered_not_raised(server: ServerProcess) -> None:
    lowered = run_python(server, "print('y' * 5000)", max_output_bytes=1000)
    assert lowered["status"] == "Failed", lowered
    assert lowered["agentenvs"]["status"] == "output_limit"
    assert lowered["run_result"]["stdout"] == "y" * 1000
    raised = run_python(server, "print('y' * 5000)", max_output_bytes=10**12)
    assert raised["status"] == "Success" and len(raised["run_result"]["stdout"]) == 5001
    assert raised["agentenvs"]["clamped"]["max_output_bytes"] == {
        "requested": 10**12,
        "applied": 1024 * 1024,
    }


async def test_our_client_sees_what_the_server_clamped(server: ServerProcess) -> None:
    """Our ``sandboxfusion`` backend surfaces ``agentenvs.clamped`` in its ExecResult."""
    from agentenvs.sandbox import create

    async with create(
        backend="sandboxfusion", url=server.url, timeout=60, memory_limit_mb=3000
    ) as sandbox:
        result = await sandbox.run("import time\ntime.sleep(8)\nprint('woke')")
        assert result.status.value == "timeout", result
        assert result.clamped == {
            "memory_limit_MB": {"requested": 3000, "applied": SERVER_MEMORY_MB},
            "run_timeout": {"requested": 60, "applied": SERVER_TIMEOUT},
            "compile_timeout": {"requested": 60, "applied": SERVER_TIMEOUT},
        }, result
        assert "memory_limit_MB 3000 -> 256" in result.message, result.message
        fits = await sandbox.run("print('hi')", timeout=1)
        assert fits.ok and fits.clamped == {"memory_limit_MB": result.clamped["memory_limit_MB"]}
