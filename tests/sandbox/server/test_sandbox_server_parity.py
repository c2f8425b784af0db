"""SandboxFusion wire parity where clients rely on it (issue #11), against our server.

The server is ``agentenvs sandbox serve`` as a process, not SandboxFusion (which
does not run here: it needs its own container image).

What SandboxFusion answers is taken from its source (bytedance/SandboxFusion,
``sandbox/server/sandbox_api.py`` and ``sandbox/runners/base.py``): a timed-out run is
``TimeLimitExceeded`` with no ``return_code``; ``message`` is ``''`` unless the sandbox
itself failed; an unknown ``language`` fails pydantic validation (HTTP 422); and
``run_timeout: 0`` times out at once. The deliberate differences are tabled in
docs/sandbox_server.md.

verl's reward function (``verl/utils/reward_score/sandbox_fusion/utils.py``,
``check_correctness``) is not called: :func:`verl_verdict` restates the rule it
applies to each response, from that source (verl 0.9.1 is installed by ``make verl``
now, so the function itself could be called against this server).
"""

from __future__ import annotations

import base64

from support.sandbox_server_helpers import ServerProcess, module_server, post_run_code, run_python

SERVE_ARGS = ("--backend", "local", "--pool-size", "2", "--timeout", "5", "--memory-mb", "256")
SERVER_OUTPUT_BYTES = 1024 * 1024


server = module_server(*SERVE_ARGS, backends=("local", "docker"))


def verl_verdict(response: dict, expected: str) -> bool | int:
    """verl's ``check_correctness`` score of one test case: True/False, or -1 (sandbox
    error), -2 (runtime error), -3 (timeout), as its source decides them."""
    run_result = response.get("run_result") or {}
    if response["status"] == "SandboxError":
        return -1
    if response["status"] == "Failed":
        if run_result.get("status") == "TimeLimitExceeded":
            return -3
        if run_result.get("status") == "Error" or run_result.get("return_code") != 0:
            return -2
        return -1
    if response["status"] == "Success" and run_result.get("status") == "Finished":
        return (run_result.get("stdout") or "").rstrip("\n") == expected.rstrip("\n")
    return -1


def test_timeout_has_no_return_code_and_an_empty_message(server: ServerProcess) -> None:
    body = run_python(server, "print('started', flush=True)\nwhile True:\n    pass", run_timeout=1)
    assert body["status"] == "Failed" and body["message"] == ""
    assert body["run_result"]["status"] == "TimeLimitExceeded"
    assert body["run_result"]["return_code"] is None
    assert body["run_result"]["stdout"] == "started\n"  # what it printed before, as theirs
    assert body["agentenvs"]["status"] == "timeout" and body["agentenvs"]["message"]
    assert verl_verdict(body, "") == -3

    from sandbox_fusion import RunCodeRequest, SummaryMapping, run_code, summary_run_code_result

    response = run_code(
        RunCodeRequest(code="while True:\n    pass", run_timeout=1, language="python"),
        endpoint=server.url,
        max_attempts=1,
    )
    assert response.run_result.return_code is None and response.message == ""
    assert summary_run_code_result(response, SummaryMapping(RunTimeout="timeout")) == "timeout"


def test_failure_message_is_empty_and_the_reason_is_in_the_extension(
    server: ServerProcess,
) -> None:
    failed = run_python(server, "1/0")
    assert failed["status"] == "Failed" and failed["message"] == ""
    assert failed["run_result"]["return_code"] == 1
    assert failed["agentenvs"] == {
        "status": "error",
        "message": failed["agentenvs"]["message"],
        "stdout_truncated": False,
        "stderr_truncated": False,
        "clamped": {},
    }
    assert "1" in failed["agentenvs"]["message"]
    memory = run_python(server, "x = bytearray(2 * 1024**3)")
    assert memory["status"] == "Failed" and memory["message"] == ""
    assert memory["agentenvs"]["status"] == "memory"
    ok = run_python(server, "print('fine')")
    assert ok["status"] == "Success" and ok["message"] == "" and ok["agentenvs"]["message"] == ""


def test_unknown_language_is_a_422(server: ServerProcess) -> None:
    answer = post_run_code(server.url, {"code": "x", "language": "brainfuck"}, expect=422)
    assert answer["detail"][0]["field"] == "language"


def test_run_timeout_zero_times_out_at_once(server: ServerProcess) -> None:
    body = run_python(server, "print('never')", run_timeout=0)
    assert body["status"] == "Failed" and body["message"] == ""
    assert body["run_result"]["status"] == "TimeLimitExceeded"
    assert body["run_result"]["return_code"] is None and body["run_result"]["stdout"] == ""


def test_a_correct_program_printing_100_kb_scores_as_correct_in_verl(
    server: ServerProcess,
) -> None:
    code = "n = int(input())\nfor i in range(n):\n    print(str(i).zfill(9))"
    expected = "".join(f"{i:09d}\n" for i in range(10_000))  # 100,000 bytes
    body = run_python(server, code, stdin="10000\n", run_timeout=5)
    assert body["status"] == "Success", body["agentenvs"]
    assert body["run_result"]["stdout"] == expected
    assert verl_verdict(body, expected) is True


def test_output_over_the_cap_is_a_failed_run_cut_at_the_cap(server: ServerProcess) -> None:
    body = run_python(server, "import sys\nsys.stdout.write('z' * (3 * 1024 * 1024))")
    assert body["status"] == "Failed" and body["message"] == ""
    assert body["run_result"]["status"] == "Finished" and body["run_result"]["return_code"] != 0
    assert body["agentenvs"]["status"] == "output_limit"
    assert body["agentenvs"]["stdout_truncated"] is True
    assert len(body["run_result"]["stdout"].encode()) <= SERVER_OUTPUT_BYTES
    assert verl_verdict(body, "z" * (3 * 1024 * 1024)) == -2


def test_invalid_utf8_output_keeps_the_valid_text(server: ServerProcess) -> None:
    body = run_python(
        server,
        "import sys\nsys.stdout.buffer.write(b'ok \\xff\\xfe end\\n')\n"
        "sys.stderr.buffer.write(b'\\xc3(\\n')",
    )
    assert body["status"] == "Success", body
    assert body["run_result"]["stdout"] == "ok \ufffd\ufffd end\n"
    assert body["run_result"]["stderr"] == "\ufffd(\n"


def test_bash_runs_sandboxed_like_python(server: ServerProcess) -> None:
    data = base64.b64encode(b"3 4\n").decode()
    body = post_run_code(
        server.url,
        {
            "code": "read a b\necho $((a + b))\nwc -c < in/n.txt > out.txt\necho err >&2",
            "language": "bash",
            "stdin": "2 5\n",
            "files": {"in/n.txt": data},
            "fetch_files": ["out.txt"],
        },
    )
    assert body["status"] == "Success", body
    assert body["run_result"]["stdout"] == "7\n" and body["run_result"]["stderr"] == "err\n"
    assert base64.b64decode(body["files"]["out.txt"]).strip() == b"4"
    failed = post_run_code(server.url, {"code": "exit 3", "language": "bash"})
    assert failed["status"] == "Failed" and failed["run_result"]["return_code"] == 3
    assert failed["message"] == ""
    slow = post_run_code(
        server.url, {"code": "while :; do :; done", "language": "bash", "run_timeout": 1}
    )
    assert slow["run_result"]["status"] == "TimeLimitExceeded"
    assert slow["run_result"]["return_code"] is None


def test_bash_has_the_same_isolation(server: ServerProcess) -> None:
    probe = (
        "echo x > /etc/agentenvs-probe 2>/dev/null && echo wrote-etc\n"
        "(exec 3<>/dev/tcp/1.1.1.1/80) 2>/dev/null && echo network\n"
        "echo $EUID\n"  # a bash builtin: the docker image has no `id`
    )
    body = post_run_code(server.url, {"code": probe, "language": "bash"})
    assert body["status"] == "Success", body
    lines = body["run_result"]["stdout"].split()
    assert "wrote-etc" not in lines and "network" not in lines
    assert lines[-1] != "0"  # not root inside the sandbox
