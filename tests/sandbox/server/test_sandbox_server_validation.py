"""Every ``/run_code`` field is checked at the API edge: a bad value is a 422 naming the field.

Issue #11, class 6: huge or infinite timeouts used to overflow inside the worker, lone
surrogates and absurd memory values came back as exit code 70 with the supervisor's
traceback, and 30 MB of code was accepted. Each case below goes to the real server
(``agentenvs sandbox serve`` on 127.0.0.1) as raw JSON, so values a typed client would
never produce (``Infinity``, ``NaN``, ``1e400``, lone surrogates) are sent too, and then
again through the ``sandbox-fusion`` PyPI client where it can express them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import httpx
import pytest
from support.sandbox_server_helpers import ServerProcess, module_server, post_run_code

from agentenvs.sandbox.server.request import (
    MAX_BODY_BYTES,
    MAX_CODE_BYTES,
    MAX_FILES,
    MAX_FILES_BYTES,
)

SERVE_ARGS = ("--backend", "local", "--pool-size", "1", "--timeout", "5", "--memory-mb", "256")
B64 = base64.b64encode(b"data").decode()


server = module_server(*SERVE_ARGS, backends=("local", "docker"))


def body(**fields: object) -> dict:
    return {"code": "print(1)", "language": "python", **fields}


def raw(text: str) -> bytes:
    """JSON written by hand: for numbers Python's json would not write (``1e400``)."""
    return text.encode()


CASES = [
    ("run_timeout", body(run_timeout=float("inf"))),
    ("run_timeout", body(run_timeout=float("-inf"))),
    ("run_timeout", body(run_timeout=float("nan"))),
    ("run_timeout", raw('{"code": "print(1)", "language": "python", "run_timeout": 1e400}')),
    ("run_timeout", body(run_timeout=-1)),
    ("run_timeout", body(run_timeout=1e12)),
    ("run_timeout", body(run_timeout="soon")),
    ("compile_timeout", body(compile_timeout=float("inf"))),
    ("compile_timeout", body(compile_timeout=-0.5)),
    ("memory_limit_MB", body(memory_limit_MB=10**30)),
    ("memory_limit_MB", body(memory_limit_MB=-5)),
    ("memory_limit_MB", body(memory_limit_MB=8)),
    ("memory_limit_MB", body(memory_limit_MB=1.5)),
    ("memory_limit_MB", body(memory_limit_MB="lots")),
    ("stdin", body(stdin="ok\ud800")),
    ("stdin", body(stdin=12)),
    ("code", body(code="print('\udfff')")),
    ("code", body(code="#" * (MAX_CODE_BYTES + 1))),
    ("code", {"language": "python"}),
    ("language", body(language="cobol")),
    ("language", body(language="cpp")),  # SandboxFusion's, not served here
    ("language", body(language="py\ud800")),
    ("files", body(files={"../x": B64})),
    ("files", body(files={"/etc/passwd": B64})),
    ("files", body(files={"a\x00b": B64})),
    ("files", body(files={"": B64})),
    ("files", body(files={"x" * 300: B64})),
    ("files", body(files={"bad\udc80": B64})),
    ("files", body(files={"in.txt": "not base64!"})),
    ("files", body(files={f"f{i}": B64 for i in range(MAX_FILES + 1)})),
    ("files", body(files={"big": base64.b64encode(bytes(MAX_FILES_BYTES + 1)).decode()})),
    ("fetch_files", body(fetch_files=["../../etc/passwd"])),
    ("fetch_files", body(fetch_files=["."])),
    ("fetch_files", body(fetch_files=[f"f{i}" for i in range(MAX_FILES + 1)])),
    ("max_output_bytes", body(max_output_bytes=-1)),
    ("body", raw('{"code": "print(1)", ')),
]


@pytest.mark.parametrize(
    ("field", "request_body"), CASES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CASES)]
)
def test_bad_field_is_a_422_naming_it(
    server: ServerProcess, field: str, request_body: dict | bytes
) -> None:
    answer = post_run_code(server.url, request_body, expect=422)
    fields = {d["field"].split(".")[0] for d in answer["detail"]}
    assert field in fields, answer
    assert answer["message"].startswith("invalid request: ") and field in answer["message"]
    text = json.dumps(answer)
    assert "Traceback" not in text and "supervisor" not in text
    assert len(text) < 4000, "the bad value must not be echoed back"


def test_body_over_the_cap_is_refused_before_parsing(server: ServerProcess) -> None:
    big = json.dumps(body(code="#" * (MAX_BODY_BYTES + 10))).encode()
    answer = post_run_code(server.url, big, expect=413)
    assert answer["detail"][0]["field"] == "body" and str(MAX_BODY_BYTES) in answer["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while it is read
        for start in range(0, len(big), 1 << 20):
            yield big[start : start + (1 << 20)]

    response = httpx.post(f"{server.url}/run_code", content=chunks(), timeout=60)
    assert response.status_code == 413, response.text[:500]


def test_the_server_is_intact_after_every_bad_request(server: ServerProcess) -> None:
    for _, request_body in CASES:
        post_run_code(server.url, request_body, expect=422)
    ok = post_run_code(server.url, body(code="print(input())", stdin="still here"))
    assert ok["status"] == "Success" and ok["run_result"]["stdout"] == "still here\n"
    edge = post_run_code(server.url, body(code="#" * (MAX_CODE_BYTES - 20) + "\nprint(2)"))
    assert edge["status"] == "Success" and edge["run_result"]["stdout"] == "2\n"
    assert "Traceback" not in server.log_text()


# --------------------------------------------------------------------------- the PyPI client

PYPI_CASES = [
    # (it refuses to send Infinity or NaN itself: those are covered by the raw cases)
    ("run_timeout", {"run_timeout": -3}),
    ("run_timeout", {"run_timeout": 1e300}),
    ("compile_timeout", {"compile_timeout": -1}),
    ("stdin", {"stdin": "\ud800"}),
    ("code", {"code": "x = '\udfff'"}),
    ("code", {"code": "#" * (MAX_CODE_BYTES + 1)}),
    ("language", {"language": "cpp"}),
    ("files", {"files": {"../escape.txt": B64}}),
    ("fetch_files", {"fetch_files": ["/etc/shadow"]}),
]


@pytest.mark.parametrize(("field", "fields"), PYPI_CASES, ids=[f for f, _ in PYPI_CASES])
def test_sandbox_fusion_client_gets_the_422(
    server: ServerProcess, field: str, fields: dict
) -> None:
    from sandbox_fusion import RunCodeRequest, run_code

    request = RunCodeRequest(**{"code": "print(1)", "language": "python", **fields})
    with pytest.raises(Exception, match="responded with code 422") as raised:
        run_code(request, endpoint=server.url, max_attempts=1)
    assert f'"field":"{field}"' in str(raised.value) and "Traceback" not in str(raised.value)
