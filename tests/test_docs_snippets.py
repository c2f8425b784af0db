"""Every code snippet in README.md and docs/*.md runs, in order, in a fresh directory.

Issue #30: the README's Quick start crashed when run in order (its Python snippet
reused the CLI's store). Here each document's snippets run top to bottom in a new
temporary directory (a fresh checkout's view: nothing but a ``.venv`` link to the
installed environment), bash blocks with ``bash -euo pipefail``, Python blocks in one
interpreter per document (a reader's session: later blocks see earlier names).

A snippet that cannot run by itself says so in an HTML comment on the line before
its fence (invisible on GitHub), and is then only checked to parse:

``<!-- snippet: fragment -->``
    part of a larger program (names defined around it, top-level ``await``);
``<!-- snippet: needs WHAT -->``
    a service, a model or data the checkout does not have (a vLLM server, Docker,
    a Ray cluster, your own store);
``<!-- snippet: setup -->``
    the machine's set-up (``make test`` installs what this very test runs in).

A snippet that needs what the suite can give it on 127.0.0.1 says which, and runs:

``<!-- snippet: with NAME[,NAME] -->``
    :data:`SERVICES` starts NAME once per document (an OpenAI-compatible server with
    a tiny model, a tokenizer directory, a corpus file) and rewrites the placeholders
    a reader would fill in (``http://127.0.0.1:8000``, ``/path/to/tokenizer``) to it;
``<!-- snippet: serves PORT -->``
    a server command that runs until stopped: it is started in the background on a
    free port (``PORT`` rewritten in this and every later snippet), must answer on
    it, and is stopped when the document ends.

Two markers make a walk-through runnable: ``<!-- snippet: file=PATH -->`` writes
the block to PATH instead of running it (the guide's module and ``pyproject.toml``),
and ``<!-- snippet: install -->`` runs the block with its ``pip install ...`` line
replaced by an install into a private ``--target`` directory on ``PYTHONPATH``
(the shared venv is left alone). Blocks in data languages (text, json, yaml, toml
without ``file=``) are examples of output or configuration, not programs.

An unmarked ``bash``/``python``/``console`` block is run: a new snippet is tested
unless its author says why not.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.paths import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PROGRAMS = {"bash", "sh", "console", "python"}
MARKERS = {"run", "fragment", "needs", "setup", "file", "install", "with", "serves"}
VENV_BIN = Path(sys.executable).parent

_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"^<!-- snippet: (\w+)(?:[ =](.*?))? -->$")


@dataclass(frozen=True)
class Snippet:
    doc: Path
    line: int
    """The fence's line number (1-based)."""
    lang: str
    code: str
    kind: str = "run"
    arg: str = ""

    @property
    def where(self) -> str:
        doc = self.doc.relative_to(REPO) if self.doc.is_relative_to(REPO) else self.doc.name
        return f"{doc}:{self.line}"


def snippets(doc: Path) -> list[Snippet]:
    """The fenced blocks of a Markdown file, with the marker right above each."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    found: list[Snippet] = []
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = _MARKER.match(lines[i - 1].strip()) if i else None
        kind, arg = (marker.group(1), (marker.group(2) or "").strip()) if marker else ("run", "")
        code = "\n".join(lines[i + 1 : end]) + "\n"
        found.append(Snippet(doc, i + 1, opened.group(1), code, kind, arg))
        i = end + 1
    return found


def console_commands(code: str) -> str:
    """The commands of a ``console`` block (``$ `` lines, and here-document bodies)."""
    kept, heredoc = [], None
    for line in code.splitlines():
        if heredoc is not None:
            kept.append(line)
            heredoc = None if line.strip() == heredoc else heredoc
        elif line.startswith("$ "):
            kept.append(line[2:])
            match = re.search(r"<<-?'?(\w+)'?", line)
            heredoc = match.group(1) if match else None
    return "\n".join(kept) + "\n"


def shell_code(snippet: Snippet) -> str:
    return console_commands(snippet.code) if snippet.lang == "console" else snippet.code


def check_parses(snippet: Snippet) -> None:
    if snippet.lang == "python":
        compile(snippet.code, snippet.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    elif snippet.lang in ("bash", "sh", "console"):
        parsed = subprocess.run(
            ["bash", "-n"], input=shell_code(snippet), text=True, capture_output=True, check=False
        )
        assert parsed.returncode == 0, f"{snippet.where}: {parsed.stderr}"


# ---- what the suite provides on 127.0.0.1 ----------------------------------------------------

Substitutions = dict[str, str]


@contextlib.contextmanager
def openai_server(work: Path) -> Iterator[Substitutions]:
    """The suite's OpenAI-compatible stand-in (the vLLM wire format, see
    ``support/rollout_vllm_standin.py``) serving a tiny random model as ``my-model``;
    the model directory is also the tokenizer."""
    from support.rollout_tiny_model import save_tiny_model
    from support.rollout_vllm_standin import Behaviour, make_app, serve

    from agentenvs.rollout.policies.hf import HFPolicy
    from agentenvs.rollout.tokenizer import train_chatml_tokenizer

    model = save_tiny_model(work / ".models" / "my-model", train_chatml_tokenizer())
    with serve(make_app(HFPolicy(str(model)).sampler, Behaviour(), model_name="my-model")) as url:
        yield {
            "http://127.0.0.1:8000": url,
            "url=...": f"url={url}",
            "/models/my-model": str(model),
        }


@contextlib.contextmanager
def tokenizer_dir(work: Path) -> Iterator[Substitutions]:
    """A tokenizer directory as a reader has one: the real Qwen2.5 vocabulary and chat
    template (``support/vocab``), saved with ``save_pretrained``."""
    from support.vocab import shared_vocabulary

    path = work / ".tokenizer"
    shared_vocabulary("qwen2.5").save_pretrained(path)
    yield {"/path/to/tokenizer": str(path)}


@contextlib.contextmanager
def wiki_corpus(work: Path) -> Iterator[Substitutions]:
    """``wiki.jsonl``: a corpus in the Search-R1 layout (``support/search_r1_retriever_corpus``)."""
    from support.search_r1_retriever_corpus import write_corpus

    write_corpus(work / "wiki.jsonl")
    yield {}


@contextlib.contextmanager
def search_r1_prompt(work: Path) -> Iterator[Substitutions]:
    """``my_search_r1_prompt.txt``: a prompt template of the reader's, ``{question}`` in it."""
    (work / "my_search_r1_prompt.txt").write_text(
        "Answer the question. Search with <search> query </search> when you need to, read "
        "what comes back, and give the answer as <answer> text </answer>. Question: {question}\n"
    )
    yield {}


PRELUDE = "\0prelude"
"""The key under which a service hands Python code to run in the session first."""


@contextlib.contextmanager
def session_names(work: Path) -> Iterator[Substitutions]:
    """The names a Python fragment takes from the program around it, defined first in
    the reader's session: ``tokenizer``, ``policy`` (scripted), ``builder``/``builders``
    (guess_number), ``store``, ``collect`` and collected ``groups``."""
    yield {
        PRELUDE: (
            "import asyncio\n"
            "from agentenvs.envs import make as _make\n"
            "from agentenvs.rollout.collect.collector import CollectOptions, collect\n"
            "from agentenvs.rollout.collect.store import TrajectoryStore\n"
            "from agentenvs.rollout.policies import make_policy\n"
            "from agentenvs.rollout.tokenizer import load_tokenizer\n"
            "tokenizer = load_tokenizer('builtin')\n"
            "policy = make_policy('scripted')\n"
            "_config = _make('guess_number', tasks=4)\n"
            "builder = _config.group_builder(0, 4, tokenizer)\n"
            "builders = [_config.group_builder(i, 4, tokenizer) for i in range(4)]\n"
            "store = TrajectoryStore('session-store.jsonl')\n"
            "groups = [r.group for r in asyncio.run(collect(\n"
            "    [_config.group_builder(i, 4, tokenizer) for i in range(4)], policy,\n"
            "    CollectOptions(progress=False))).ok]\n"
        )
    }


@contextlib.contextmanager
def alfworld_groups(work: Path) -> Iterator[Substitutions]:
    """``groups``: two ALFWorld groups of the shipped games, collected with the scripted
    oracle (their steps name their states, as GiGPO needs)."""
    yield {
        PRELUDE: (
            "import asyncio\n"
            "from agentenvs.envs import make as _make\n"
            "from agentenvs.rollout.collect.collector import CollectOptions as _options\n"
            "from agentenvs.rollout.collect.collector import collect as _collect\n"
            "from agentenvs.rollout.policies import make_policy as _policy\n"
            "from agentenvs.rollout.tokenizer import load_tokenizer as _load\n"
            "_alfworld = _make('alfworld', data='shipped')\n"
            "groups = [r.group for r in asyncio.run(_collect(\n"
            "    [_alfworld.group_builder(i, 3, _load('builtin')) for i in range(2)],\n"
            "    _policy('scripted'), _options(progress=False))).ok]\n"
        )
    }


SERVICES: dict[str, Callable[[Path], contextlib.AbstractContextManager[Substitutions]]] = {
    "session-names": session_names,
    "alfworld-groups": alfworld_groups,
    "openai-server": openai_server,
    "tokenizer-dir": tokenizer_dir,
    "wiki-corpus": wiki_corpus,
    "search-r1-prompt": search_r1_prompt,
}
"""``with NAME`` -> what it starts or writes in the reader's directory, and the text it
replaces in the snippet (stopped when the document ends)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# ---- running a document ---------------------------------------------------------------------

KERNEL = r"""
import ast, asyncio, inspect, json, sys, traceback
namespace = {"__name__": "__main__"}
for line in sys.stdin:
    block = json.loads(line)
    try:
        # Top-level ``await`` / ``async for`` as in a notebook or ``python -m asyncio``.
        code = compile(block["code"], block["where"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, namespace)
        if inspect.iscoroutine(result):
            asyncio.run(result)
    except BaseException:
        traceback.print_exc(file=sys.stdout)
        print("\n@@SNIPPET FAILED@@", flush=True)
    else:
        print("\n@@SNIPPET OK@@", flush=True)
"""


class Reader:
    """One document's run: its directory, environment and Python session."""

    def __init__(self, work: Path) -> None:
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.site = work / ".snippet-site"
        self.site.mkdir()
        (work / ".venv").symlink_to(VENV_BIN.parent)
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COLUMNS")}
        self.env.update(PATH=f"{VENV_BIN}:{os.environ['PATH']}", PYTHONPATH=str(self.site))
        self.env["AGENTENVS_PROGRESS_SECONDS"] = "3600"  # one progress line per command
        self.python: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.written: set[Path] = set()
        self.services = contextlib.ExitStack()
        self.started: set[str] = set()
        self.substitutions: Substitutions = {}
        self.preludes: list[tuple[str, str]] = []
        """Python code of services, run in the session before the next Python block."""

    def provide(self, names: str) -> None:
        """Start the ``with`` services a snippet names (once per document)."""
        for name in (n.strip() for n in names.split(",")):
            assert name in SERVICES, f"unknown service {name!r}; known: {sorted(SERVICES)}"
            if name not in self.started:
                self.started.add(name)
                given = dict(self.services.enter_context(SERVICES[name](self.work)))
                if PRELUDE in given:
                    self.preludes.append((name, given.pop(PRELUDE)))
                self.substitutions.update(given)

    def substituted(self, snippet: Snippet) -> Snippet:
        code = snippet.code
        for placeholder, value in self.substitutions.items():
            if placeholder == PRELUDE:
                continue
            code = code.replace(placeholder, value)
        return Snippet(snippet.doc, snippet.line, snippet.lang, code, snippet.kind, snippet.arg)

    def run(self, snippet: Snippet, timeout: float = 600) -> None:
        if snippet.kind == "with":
            self.provide(snippet.arg)
        if snippet.kind == "serves":
            self.serve(snippet, int(snippet.arg))
            return
        snippet = self.substituted(snippet)
        if snippet.kind == "file":
            self.write(snippet)
        elif snippet.lang == "python":
            self.run_python(snippet, timeout)
        else:
            code = shell_code(snippet)
            if snippet.kind == "install":
                code = self.private_install(code)
            self.run_shell(snippet, code, timeout)

    def write(self, snippet: Snippet) -> None:
        path = self.work / snippet.arg
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a" if path in self.written else "w", encoding="utf-8") as handle:
            handle.write(snippet.code)
        self.written.add(path)

    def private_install(self, code: str) -> str:
        """``pip install [-e] PATH`` as an install of PATH into this reader's site dir."""
        lines = []
        for line in code.splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["pip", "install"]:
                target = [w for w in words[2:] if not w.startswith("-")]
                line = shlex.join([
                    sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "--target", str(self.site), *target,
                ])  # fmt: skip
            lines.append(line)
        return "\n".join(lines) + "\n"

    def serve(self, snippet: Snippet, port: int, timeout: float = 120) -> None:
        """Start a command that serves until stopped on a free port instead of ``port``
        (rewritten here and in later snippets); it must answer, and ends with the document."""
        free = _free_port()
        for form in (f"127.0.0.1:{port}", f"localhost:{port}", f"--port {port}"):
            self.substitutions[form] = form.replace(str(port), str(free))
        code = shell_code(self.substituted(snippet))
        log = (self.work / f".serves-{free}.log").open("w")
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", code], cwd=self.work, env=self.env,
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

        def stop() -> None:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)  # the session this test started
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
            log.close()

        self.services.callback(stop)
        deadline = time.monotonic() + timeout
        while not _answers(free):
            if process.poll() is not None or time.monotonic() > deadline:
                log.flush()
                text = (self.work / f".serves-{free}.log").read_text()[-3000:]
                pytest.fail(f"{snippet.where}: did not serve on port {free}:\n{code}\n{text}")
            time.sleep(0.2)

    def run_shell(self, snippet: Snippet, code: str, timeout: float) -> None:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", code],
            cwd=self.work, env=self.env, capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (
            f"{snippet.where} exited {done.returncode}:\n{code}\n--- stdout\n{done.stdout[-3000:]}"
            f"\n--- stderr\n{done.stderr[-3000:]}"
        )

    def run_python(self, snippet: Snippet, timeout: float) -> None:
        if self.python is None:
            self.python = subprocess.Popen(
                [sys.executable, "-u", "-c", KERNEL],
                cwd=self.work, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            threading.Thread(target=self._read_lines, daemon=True).start()
        while self.preludes:
            name, code = self.preludes.pop(0)
            self._exec(Snippet(snippet.doc, snippet.line, "python", code, "with", name), timeout)
        self._exec(snippet, timeout)

    def _exec(self, snippet: Snippet, timeout: float) -> None:
        assert self.python is not None and self.python.stdin is not None
        self.python.stdin.write(json.dumps({"code": snippet.code, "where": snippet.where}) + "\n")
        self.python.stdin.flush()
        output: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"{snippet.where}: no end after {timeout}s:\n{''.join(output)[-3000:]}")
            assert line is not None, f"{snippet.where}: the interpreter ended:\n{''.join(output)}"
            if line.strip() == "@@SNIPPET OK@@":
                return
            if line.strip() == "@@SNIPPET FAILED@@":
                pytest.fail(f"{snippet.where} raised:\n{snippet.code}\n{''.join(output)[-4000:]}")
            output.append(line)

    def _read_lines(self) -> None:
        assert self.python is not None and self.python.stdout is not None
        for line in self.python.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def close(self) -> None:
        try:
            self._close_python()
        finally:
            self.services.close()

    def _close_python(self) -> None:
        if self.python is not None:
            if self.python.stdin is not None:
                self.python.stdin.close()
            try:
                self.python.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.python.kill()
                self.python.wait()


# ---- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_snippet_of_the_document_runs_in_order(doc: Path, tmp_path: Path) -> None:
    reader = Reader(tmp_path)
    try:
        for snippet in snippets(doc):
            if snippet.lang not in PROGRAMS and snippet.kind != "file":
                continue  # an example of output or configuration
            if snippet.kind in ("fragment", "needs", "setup"):
                check_parses(snippet)
                continue
            reader.run(snippet)
    finally:
        reader.close()


def test_every_marker_is_known_and_says_why() -> None:
    for doc in DOCS:
        for snippet in snippets(doc):
            assert snippet.kind in MARKERS, f"{snippet.where}: unknown marker {snippet.kind!r}"
            if snippet.kind in ("needs", "file", "with", "serves"):
                assert snippet.arg, f"{snippet.where}: `{snippet.kind}` says what (or where)"
            if snippet.kind == "with":
                unknown = {n.strip() for n in snippet.arg.split(",")} - set(SERVICES)
                assert not unknown, f"{snippet.where}: no service {unknown}; see SERVICES"
            if snippet.kind == "serves":
                assert snippet.arg.isdigit(), f"{snippet.where}: `serves PORT`"
                assert snippet.arg in snippet.code, f"{snippet.where}: port {snippet.arg} not in it"
            if snippet.kind != "run":
                assert snippet.lang in PROGRAMS | {"toml"}, f"{snippet.where}: marks data"


def test_the_guides_package_is_a_complete_pyproject() -> None:
    """The guide's ``pyproject.toml`` lacked ``[build-system]`` (issue #30)."""
    guide = REPO / "docs" / "writing-an-env.md"
    written = [s for s in snippets(guide) if s.kind == "file" and s.arg == "pyproject.toml"]
    assert len(written) == 1
    project = tomllib.loads(written[0].code)
    assert project["build-system"]["build-backend"]
    assert project["project"]["name"] and project["project"]["version"]
    assert "agentenvs.envs" in project["project"]["entry-points"]


def test_cross_references_to_readme_sections_exist() -> None:
    """docs/cli.md cited the README's "Checking a run" section, which does not exist."""
    headings = {
        line.lstrip("#").strip()
        for line in (REPO / "README.md").read_text().splitlines()
        if line.startswith("#")
    }
    for doc in DOCS:
        for cited in re.findall(r"README's \"([^\"]+)\" section", doc.read_text()):
            assert cited in headings, f"{doc.name} cites a README section {cited!r}"


def test_the_parser_sees_markers_and_the_runner_fails_a_failing_snippet(tmp_path: Path) -> None:
    """The machinery itself: a marker is read, a failing block fails the run."""
    doc = tmp_path / "x.md"
    doc.write_text(
        "text\n<!-- snippet: needs a vLLM server -->\n```bash\ncurl http://x\n```\n\n"
        "```python\nvalue = 41\n```\n\n```python\nassert value == 42, 'caught'\n```\n"
        "```bash\nfalse\n```\n"
    )
    found = snippets(doc)
    assert [(s.lang, s.kind, s.arg) for s in found] == [
        ("bash", "needs", "a vLLM server"), ("python", "run", ""), ("python", "run", ""),
        ("bash", "run", ""),
    ]  # fmt: skip
    reader = Reader(tmp_path / "work")
    try:
        reader.run(found[1])
        with pytest.raises(pytest.fail.Exception, match="caught"):
            reader.run(found[2])  # the session kept `value` from the block before
        with pytest.raises(AssertionError, match="exited 1"):
            reader.run(found[3])
    finally:
        reader.close()


def test_a_served_port_is_rewritten_answered_and_a_dead_server_fails(tmp_path: Path) -> None:
    """``serves PORT``: the command runs on a free port, later snippets reach it there,
    and a command that never listens fails the document instead of being skipped."""
    doc = tmp_path / "x.md"
    doc.write_text(
        "<!-- snippet: serves 8000 -->\n```bash\n"
        'python -c \'import sys, http.server as h; h.HTTPServer(("127.0.0.1", int(sys.argv[2])),'
        " h.SimpleHTTPRequestHandler).serve_forever()' --port 8000\n```\n\n"
        "```python\nimport urllib.request\n"
        "assert urllib.request.urlopen('http://127.0.0.1:8000/').status == 200\n```\n\n"
        "<!-- snippet: serves 8001 -->\n```bash\necho 'not serving on 8001'\n```\n"
    )
    served, reached, dead = snippets(doc)
    assert (served.kind, served.arg, dead.arg) == ("serves", "8000", "8001")
    reader = Reader(tmp_path / "work")
    try:
        reader.run(served)
        assert "127.0.0.1:8000" not in reader.substituted(reached).code
        reader.run(reached)
        with pytest.raises(pytest.fail.Exception, match="did not serve on port"):
            reader.run(dead)
    finally:
        reader.close()
