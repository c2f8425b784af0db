"""The ``sandboxfusion`` backend: an HTTP client for SandboxFusion's ``POST /run_code``.

SandboxFusion (ByteDance) runs code in its own sandboxes behind one stateless endpoint;
so does ``agentenvs sandbox serve`` (:mod:`agentenvs.sandbox.server.app`). The wire format
(confirmed against bytedance/SandboxFusion ``sandbox/server/sandbox_api.py``):

- request: ``code``, ``language`` ("python"), ``compile_timeout``, ``run_timeout``,
  ``memory_limit_MB`` (-1: the server's default), ``stdin``, ``files`` (path -> base64),
  ``fetch_files``;
- response: ``status`` (``Success`` / ``Failed`` / ``SandboxError``), ``message``,
  ``compile_result`` and ``run_result`` (each ``status`` ``Finished`` / ``Error`` /
  ``TimeLimitExceeded``, ``execution_time``, ``return_code``, ``stdout``, ``stderr``),
  ``files``.

``run(..., files=, fetch_files=, language=)`` map to ``files`` (base64), ``fetch_files``
(decoded back into ``ExecResult.files``) and ``language`` (``"python"`` sends the
client's own ``language``). Against ``agentenvs sandbox serve`` the answer's ``agentenvs``
extension gives the exact status (memory and output-limit stops, which SandboxFusion folds
into ``Failed``).

What this client adds: a bound on requests in flight (``max_concurrency``), an HTTP
timeout derived from the run timeout, retries with exponential backoff and jitter only
where repeating is harmless (the server was not reached, or answered 5xx/429: a
stateless run has no state to corrupt), output capped at ``max_output_bytes`` like every
backend, the notebook-style display of a final bare expression, and sessions: the API
keeps no state, so a session replays its earlier successful cells (their output
suppressed) before each new cell.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import binascii
import contextlib
import io
import random
import tokenize
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from agentenvs.sandbox.base import (
    Capabilities,
    ExecResult,
    ExecStatus,
    Sandbox,
    SandboxConfig,
    SandboxUnavailable,
    Session,
)
from agentenvs.sandbox.capabilities import LAYERS, enforce_minimum

HTTP_SLACK_SECONDS = 30.0
"""The HTTP timeout is the run timeout plus this: queueing and start-up on the server."""
RETRY_STATUS = {429, 500, 502, 503, 504}
REPLAY_FAILED_EXIT = 97
REPLAY_MARKER = "agentenvs: replaying earlier cell"


def show_last_expression(code: str) -> str:
    """Make a final bare expression print its ``repr``, as a notebook displays it.

    The expression's text is replaced, in place, by a call that prints it unless it is
    None, so line numbers (and tracebacks) are unchanged. Code that does not parse, or
    whose last line ends with ``;``, is returned as it is.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code
    if _ends_with_semicolon(code):
        return code
    node = tree.body[-1].value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
        return code  # None: nothing to show, and the request stays readable
    if node.end_lineno is None or node.end_col_offset is None:
        return code
    source_lines = code.splitlines(keepends=True)
    start = sum(len(line) for line in source_lines[: node.lineno - 1]) + _byte_to_char(
        source_lines[node.lineno - 1], node.col_offset
    )
    end = sum(len(line) for line in source_lines[: node.end_lineno - 1]) + _byte_to_char(
        source_lines[node.end_lineno - 1], node.end_col_offset
    )
    wrapped = f"(lambda __v: None if __v is None else print(repr(__v)))(({code[start:end]}))"
    return code[:start] + wrapped + code[end:]


def _ends_with_semicolon(code: str) -> bool:
    """A trailing ``;`` hides the value, as in IPython (and the other backends)."""
    ignored = {tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER, tokenize.DEDENT}
    last = None
    with contextlib.suppress(tokenize.TokenError, SyntaxError):
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type not in ignored:
                last = token
    return last is not None and last.type == tokenize.OP and last.string == ";"


def _byte_to_char(line: str, byte_offset: int) -> int:
    """ast offsets count UTF-8 bytes; string slicing counts characters."""
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def replay_program(cells: list[str], code: str) -> str:
    """One script that re-runs ``cells`` silently, then ``code`` as the visible cell."""
    return (
        "import io as __io, sys as __sys\n"
        f"__cells = {cells!r}\n"
        "__saved = __sys.stdout, __sys.stderr\n"
        "__sys.stdout = __sys.stderr = __io.StringIO()\n"
        "try:\n"
        "    for __i, __cell in enumerate(__cells):\n"
        "        exec(compile(__cell, f'<cell-{__i + 1}>', 'exec'), globals())\n"
        "except BaseException as __exc:\n"
        "    __sys.stdout, __sys.stderr = __saved\n"
        f"    print('{REPLAY_MARKER}', __i + 1, 'failed:', type(__exc).__name__, __exc, file=__sys.stderr)\n"
        f"    __sys.exit({REPLAY_FAILED_EXIT})\n"
        "__sys.stdout, __sys.stderr = __saved\n"
        "del __io, __cells, __saved\n"
        f"exec(compile({code!r}, '<cell-{len(cells) + 1}>', 'exec'), globals())\n"
    )


def cap_utf8(text: str | None, limit: int) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` UTF-8 bytes (never mid-character), and whether it was."""
    data = (text or "").encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text or "", False
    return data[:limit].decode("utf-8", errors="ignore"), True


def to_exec_result(body: dict[str, Any], *, max_output_bytes: int) -> ExecResult:
    """Map a ``/run_code`` response to an :class:`ExecResult`."""
    status = body.get("status")
    message = str(body.get("message") or "")
    run = body.get("run_result") or {}
    compile_result = body.get("compile_result") or {}
    stdout, out_cut = cap_utf8(run.get("stdout"), max_output_bytes)
    stderr, err_cut = cap_utf8(run.get("stderr") or compile_result.get("stderr"), max_output_bytes)
    result = ExecResult(
        status=ExecStatus.OK,
        stdout=stdout,
        stderr=stderr,
        return_code=run.get("return_code"),
        duration=float(run.get("execution_time") or 0.0),
        stdout_truncated=out_cut,
        stderr_truncated=err_cut,
        message=message,
    )
    if status == "SandboxError" or run.get("status") == "Error":
        result.status = ExecStatus.SANDBOX_ERROR
        result.message = message or "the SandboxFusion server reported a sandbox error"
    elif (
        run.get("status") == "TimeLimitExceeded"
        or compile_result.get("status") == "TimeLimitExceeded"
    ):
        result.status = ExecStatus.TIMEOUT
        result.message = message or "the program exceeded the run timeout"
    elif not run and compile_result.get("return_code") not in (0, None):
        result.status = ExecStatus.ERROR
        result.return_code = compile_result.get("return_code")
        result.message = message or "compilation failed"
    elif not run:
        result.status = ExecStatus.SANDBOX_ERROR
        result.message = message or f"the server answered {status!r} without a run result"
    elif run.get("return_code") not in (0, None) or status == "Failed":
        last = stderr.rstrip().rsplit("\n", 1)[-1]
        if last.startswith("MemoryError") or "MemoryError" in last.split(":", 1)[0]:
            result.status = ExecStatus.MEMORY
            result.message = message or "the program ran out of memory (MemoryError)"
        else:
            result.status = ExecStatus.ERROR
            result.message = message or f"exited with code {run.get('return_code')}"
    _apply_server_report(result, body.get("agentenvs"))
    if result.status in (ExecStatus.OK, ExecStatus.ERROR) and (out_cut or err_cut):
        which = " and ".join(n for n, cut in (("stdout", out_cut), ("stderr", err_cut)) if cut)
        result.status = ExecStatus.OUTPUT_LIMIT
        result.message = f"{which} exceeded {max_output_bytes} bytes (cut by the client)"
    return result


def fetched_files(body: dict[str, Any], asked: list[str]) -> dict[str, bytes]:
    """The response's ``files`` that were asked for and decode as base64 (others dropped)."""
    files = body.get("files")
    if not isinstance(files, dict):
        return {}
    out = {}
    for path in asked:
        content = files.get(path)
        if isinstance(content, str):
            with contextlib.suppress(binascii.Error, ValueError):
                out[path] = base64.b64decode(content, validate=True)
    return out


def _apply_server_report(result: ExecResult, report: object) -> None:
    """An agentenvs server says what happened in our own terms (``agentenvs``): use it.

    Why: SandboxFusion's contract folds memory and output-limit stops into ``Failed``
    with an empty ``message``; the extension keeps them apart. Other servers omit it.
    """
    if not isinstance(report, dict):
        return
    try:
        status = ExecStatus(report.get("status"))
    except ValueError:
        return
    if result.status == ExecStatus.SANDBOX_ERROR and status != ExecStatus.SANDBOX_ERROR:
        return  # the wire says the sandbox failed: never report less than that
    result.status = status
    result.message = str(report.get("message") or result.message)
    result.stdout_truncated |= bool(report.get("stdout_truncated"))
    result.stderr_truncated |= bool(report.get("stderr_truncated"))
    result.clamped = clamped_limits(report.get("clamped"))
    if result.clamped:
        lowered = ", ".join(
            f"{name} {c['requested']:g} -> {c['applied']:g}" for name, c in result.clamped.items()
        )
        note = f"the server lowered limits above its own: {lowered}"
        result.message = f"{result.message}; {note}" if result.message else note


def clamped_limits(report: object) -> dict[str, dict[str, float]]:
    """The server's ``clamped`` report, keeping only well-formed numeric entries."""
    if not isinstance(report, dict):
        return {}
    out: dict[str, dict[str, float]] = {}
    for name, entry in report.items():
        if not isinstance(entry, dict):
            continue
        requested, applied = entry.get("requested"), entry.get("applied")
        numbers = all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in (requested, applied)
        )
        if numbers:
            out[str(name)] = {"requested": requested, "applied": applied}
    return out


class SandboxFusionSandbox(Sandbox):
    """Runs code on a SandboxFusion-compatible server (``SandboxConfig.url``)."""

    def __init__(
        self,
        config: SandboxConfig | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        language: str = "python",
        backoff_base: float = 0.25,
        backoff_max: float = 8.0,
        http_slack: float = HTTP_SLACK_SECONDS,
        check_server: bool = True,
    ) -> None:
        super().__init__(config or SandboxConfig(backend="sandboxfusion"))
        self.language = language
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.http_slack = http_slack
        self.check_server = check_server
        self._client = client
        self._owns_client = client is None
        self._limit: asyncio.Semaphore | None = None
        self._caps: Capabilities | None = None
        self._started = False
        self._closed = False
        self.stats = {"requests": 0, "retries": 0}

    @property
    def url(self) -> str:
        if not self.config.url:
            raise SandboxUnavailable(
                "the sandboxfusion backend needs SandboxConfig.url (e.g. http://127.0.0.1:8080)"
            )
        url = self.config.url.rstrip("/")
        return url.removesuffix("/run_code")

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._closed:
            raise SandboxUnavailable("this sandbox has been closed")
        if self._started:
            return
        url = self.url
        if self._client is None:
            limits = httpx.Limits(
                max_connections=self.config.max_concurrency,
                max_keepalive_connections=self.config.max_concurrency,
            )
            self._client = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(10.0))
        self._limit = asyncio.Semaphore(self.config.max_concurrency)
        self._caps = await self._server_capabilities(url) if self.check_server else self._unknown()
        enforce_minimum(self._caps, self.config.min_isolation)
        self._started = True

    def _unknown(self, note: str = "") -> Capabilities:
        caps = Capabilities(backend="sandboxfusion")
        for name in LAYERS:
            caps.active[name] = False
            caps.notes[name] = (
                note or "isolation is the remote server's; this client cannot measure it"
            )
        return caps

    async def _server_capabilities(self, url: str) -> Capabilities:
        """Reachability check; an agentenvs server also reports its layers (unverified)."""
        assert self._client is not None
        try:
            ping = await self._client.get(f"{url}/v1/ping", timeout=10.0)
        except httpx.HTTPError as exc:
            raise SandboxUnavailable(
                f"the SandboxFusion server at {url} is unreachable: {exc!r}"
            ) from exc
        if ping.status_code >= 500:
            raise SandboxUnavailable(
                f"the SandboxFusion server at {url} answered {ping.status_code}",
                status=ping.status_code,
            )
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TypeError):
            response = await self._client.get(f"{url}/agentenvs/capabilities", timeout=10.0)
            if response.status_code == 200:
                report = response.json()
                caps = Capabilities(backend="sandboxfusion")
                for name, active in report["active"].items():
                    caps.active[name] = bool(active)
                    note = report.get("notes", {}).get(name, "")
                    caps.notes[name] = (
                        f"reported by the server ({report['backend']} backend): {note}"
                    )
                return caps
        return self._unknown()

    def capabilities(self) -> Capabilities:
        return self._caps or self._unknown("not started: the server has not been asked yet")

    async def close(self) -> None:
        self._closed = True
        if self._owns_client and self._client is not None:
            await self._client.aclose()
        self._client = None

    # ------------------------------------------------------------------ runs
    async def run(
        self,
        code: str,
        *,
        timeout: float | None = None,
        memory_limit_mb: int | None = None,
        stdin: str | None = None,
        files: Mapping[str, bytes] | None = None,
        fetch_files: Sequence[str] = (),
        language: str = "python",
    ) -> ExecResult:
        if self.config.show_last_expression and language == "python":
            code = show_last_expression(code)
        return await self.run_raw(
            code,
            timeout=timeout,
            memory_limit_mb=memory_limit_mb,
            stdin=stdin,
            files=files,
            fetch_files=fetch_files,
            language=language,
        )

    async def run_raw(
        self,
        code: str,
        *,
        timeout: float | None = None,
        memory_limit_mb: int | None = None,
        stdin: str | None = None,
        files: Mapping[str, bytes] | None = None,
        fetch_files: Sequence[str] = (),
        language: str | None = None,
    ) -> ExecResult:
        """Send ``code`` as it is (no display transform) and map the answer.

        ``language`` ``"python"`` (the default) is sent as the ``language`` this client
        was built with, so a client made for another SandboxFusion mode keeps it.
        """
        if (refusal := await self._refuse_or_start(closed=self._closed)) is not None:
            return refusal
        timeout = float(timeout or self.config.timeout)
        payload = {
            "code": code,
            "language": self.language if language in (None, "python") else language,
            "compile_timeout": timeout,
            "run_timeout": timeout,
            "memory_limit_MB": int(memory_limit_mb or self.config.memory_limit_mb),
            "stdin": stdin,
            "files": {
                path: base64.b64encode(data).decode() for path, data in (files or {}).items()
            },
            "fetch_files": list(fetch_files),
        }
        assert self._limit is not None
        async with self._limit:
            body = await self._post(payload, http_timeout=timeout + self.http_slack)
        if isinstance(body, ExecResult):
            return body
        result = to_exec_result(body, max_output_bytes=self.config.max_output_bytes)
        result.files = fetched_files(body, list(fetch_files))
        return result

    async def _post(self, payload: dict, *, http_timeout: float) -> dict | ExecResult:
        assert self._client is not None
        url = f"{self.url}/run_code"
        attempts = self.config.retries + 1
        last = ""
        for attempt in range(attempts):
            if attempt:
                self.stats["retries"] += 1
                delay = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
                await asyncio.sleep(delay * (0.5 + random.random() / 2))
            self.stats["requests"] += 1
            try:
                response = await self._client.post(url, json=payload, timeout=http_timeout)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                last = f"cannot connect to {url}: {exc!r}"
                continue  # never reached the server: always safe to retry
            except httpx.RemoteProtocolError as exc:
                last = f"the server at {url} dropped the connection: {exc!r}"
                continue  # a stateless run: repeating it cannot corrupt anything
            except httpx.TimeoutException:
                return ExecResult(
                    ExecStatus.SANDBOX_ERROR,
                    message=f"no answer from {url} within {http_timeout:g} s (not retried)",
                )
            except httpx.HTTPError as exc:
                return ExecResult(
                    ExecStatus.SANDBOX_ERROR, message=f"request to {url} failed: {exc!r}"
                )
            if response.status_code in RETRY_STATUS:
                last = f"{url} answered HTTP {response.status_code}: {response.text[:300]}"
                continue
            if response.status_code != 200:
                return ExecResult(
                    ExecStatus.SANDBOX_ERROR,
                    message=f"{url} answered HTTP {response.status_code}: {response.text[:300]}",
                )
            try:
                body = response.json()
            except ValueError:
                return ExecResult(
                    ExecStatus.SANDBOX_ERROR, message=f"{url} answered with invalid JSON"
                )
            if not isinstance(body, dict):
                return ExecResult(
                    ExecStatus.SANDBOX_ERROR, message=f"{url} answered with a non-object"
                )
            return body
        return ExecResult(
            ExecStatus.SANDBOX_ERROR, message=f"gave up after {attempts} attempt(s): {last}"
        )

    def session(self) -> SandboxFusionSession:
        return SandboxFusionSession(self)


class SandboxFusionSession(Session):
    """Notebook-like cells over a stateless API: each request replays the kept cells.

    A cell is kept when it succeeds; a cell that fails, times out or crashes leaves the
    state as it was (it is simply not replayed). The replay costs the kept cells' run
    time again on every request, so the run timeout of a request grows by it.
    """

    def __init__(self, sandbox: SandboxFusionSandbox) -> None:
        self._sandbox = sandbox
        self._cells: list[str] = []
        self._durations: list[float] = []
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def cells(self) -> list[str]:
        return list(self._cells)

    async def run(self, code: str, *, timeout: float | None = None) -> ExecResult:
        if self._closed:
            return ExecResult(ExecStatus.SANDBOX_ERROR, message="the session is closed")
        async with self._lock:
            sandbox = self._sandbox
            cell = show_last_expression(code) if sandbox.config.show_last_expression else code
            timeout = float(timeout or sandbox.config.timeout)
            if self._cells:
                program = replay_program(self._cells, cell)
                budget = timeout + 2 * sum(self._durations) + 1.0
            else:
                program, budget = cell, timeout
            result = await sandbox.run_raw(program, timeout=budget)
            if (
                self._cells
                and result.return_code == REPLAY_FAILED_EXIT
                and REPLAY_MARKER in result.stderr
            ):
                result.status = ExecStatus.SANDBOX_ERROR
                result.message = (
                    "the session's state could not be rebuilt on the stateless server: "
                    + result.stderr.strip().splitlines()[-1]
                )
            elif result.ok:
                self._cells.append(cell)
                self._durations.append(result.duration)
            return result

    async def fork(self) -> SandboxFusionSession:
        """The state of a session on a stateless server is its list of kept cells: the
        fork copies the list, and its next request replays them, as every request does."""
        clone = SandboxFusionSession(self._sandbox)
        clone._cells = list(self._cells)
        clone._durations = list(self._durations)
        return clone

    async def close(self) -> None:
        self._closed = True
        self._cells.clear()
