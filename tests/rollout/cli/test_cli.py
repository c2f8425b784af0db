"""The agentenvs command: list, rollout, view, demo, and one-line errors for bad input."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentenvs.rollout.cli import CLIError, app, parse_assignments

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def assert_one_line_error(result, *fragments: str, code: int = 2) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in lines[0]


def rollout(out: Path, *extra: str):
    return invoke(
        "rollout", "guess_number", "--groups", "3", "--group-size", "2",
        "--out", out, "--json-summary", "--no-progress", *extra,
    )  # fmt: skip


# ---- parsing --------------------------------------------------------------------------------


def test_parse_assignments_nests_and_reads_json() -> None:
    parsed = parse_assignments(
        ["limits.max_turns=5", "limits.max_tokens_per_turn=64", "renderer=chat", "words=[\"a\"]",
         "name=plain text", "flag=true", "empty="],
        "--set",
    )  # fmt: skip
    assert parsed == {
        "limits": {"max_turns": 5, "max_tokens_per_turn": 64},
        "renderer": "chat",
        "words": ["a"],
        "name": "plain text",
        "flag": True,
        "empty": "",
    }


@pytest.mark.parametrize(
    "items", [["novalue"], ["=3"], ["a..b=1"], ["a=1", "a.b=2"], ["a.b=2", "a=1"]]
)
def test_parse_assignments_rejects_bad_input(items) -> None:
    with pytest.raises(CLIError):
        parse_assignments(items, "--set")


# ---- list ----------------------------------------------------------------------------------


def test_list_table_and_json() -> None:
    table = invoke("list")
    assert table.exit_code == 0
    assert "guess_number" in table.stdout and "agentenvs/GuessNumber-v0" in table.stdout
    rows = {row["name"]: row for row in json.loads(invoke("list", "--json").stdout)}
    assert rows["guess_number"]["gym_id"] == "agentenvs/GuessNumber-v0"
    assert rows["guess_number"]["entry_point"] == "agentenvs.envs.guess_number:GuessNumberConfig"
    assert rows["guess_number"]["available"] is True
    for row in rows.values():  # an entry that cannot load says why instead of vanishing
        assert row["available"] or row["error"]


# ---- rollout -------------------------------------------------------------------------------


def test_rollout_writes_records_and_one_json_line(tmp_path) -> None:
    out = tmp_path / "runs" / "g.jsonl"
    result = rollout(out)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    summary = json.loads(lines[0])
    assert summary["groups"] == 3 and summary["trajectories"] == 6 and summary["failed"] == 0
    assert summary["mean_reward"] == 1.0  # the oracle bisects within the default 10 turns
    assert summary["skipped"] == 0 and summary["stop_reasons"] == {"completed": 6}

    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["key"] for r in records] == sorted(r["key"] for r in records) or len(records) == 3
    assert {r["task_id"] for r in records} == {"train/0", "train/1", "train/2"}
    prov = records[0]["provenance"]
    assert prov["tokenizer"]["spec"] == "builtin"
    assert len(prov["tokenizer"]["chat_template_sha256"]) == 16
    assert prov["env"]["name"] == "guess_number"
    assert prov["env"]["renderer"] == "chat"
    assert prov["env"]["version"] == "0"
    assert len(prov["env"]["config_sha256"]) == 16
    assert prov["policy"]["kind"] == "scripted"
    assert prov["policy"]["options"]["variant"] == "oracle"
    assert records[0]["env_config"]["limits"]["max_turns"] == 10


def test_rollout_resumes_and_applies_sets(tmp_path) -> None:
    out = tmp_path / "g.jsonl"
    first = rollout(out, "--set", "limits.max_turns=2", "--set", "high=1000")
    assert first.exit_code == 0, first.stderr
    assert json.loads(first.stdout)["stop_reasons"] == {"max_turns": 6}
    again = invoke(
        "rollout", "guess_number", "--groups", "5", "--group-size", "2", "--out", out,
        "--json-summary", "--set", "limits.max_turns=2", "--set", "high=1000",
    )  # fmt: skip
    assert again.exit_code == 0, again.stderr
    summary = json.loads(again.stdout)
    assert (summary["skipped"], summary["groups"]) == (3, 2)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 5 and len({r["key"] for r in records}) == 5
    assert all(r["env_config"]["limits"]["max_turns"] == 2 for r in records)
    assert all(r["env_config"]["high"] == 1000 for r in records)


def test_rollout_table_by_default(tmp_path) -> None:
    result = invoke(
        "rollout", "guess_number", "--groups", "1", "--group-size", "1",
        "--out", tmp_path / "t.jsonl", "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    for word in (
        "groups", "trajectories", "reward mean ± std", "1.0000 ± 0.0000", "stop reasons",
        "completed: 1", "elapsed", "episodes/s", "sampled tokens/s",
        "zero-advantage groups", "100% (constant reward",
    ):  # fmt: skip
        assert word in result.stdout


def test_replay_reproduces_the_tokens(tmp_path) -> None:
    source, copy = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert rollout(source).exit_code == 0
    replay = rollout(copy, "--policy", "replay", "--policy-opt", f"path={source}")
    assert replay.exit_code == 0, replay.stderr
    assert json.loads(replay.stdout)["mean_reward"] == 1.0

    def actions(path: Path) -> dict:
        return {
            r["key"]: [[t["ac"] for t in traj["transitions"]] for traj in r["trajectories"]]
            for r in map(json.loads, path.read_text().splitlines())
        }

    assert actions(copy) == actions(source)


def test_unknown_env(tmp_path) -> None:
    result = invoke("rollout", "no_such_env", "--out", tmp_path / "x.jsonl")
    assert_one_line_error(result, "unknown environment 'no_such_env'", "guess_number")
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.parametrize(
    ("sets", "fragment"),
    [
        (["nope=1"], "nope"),
        (["limits.max_turn=3"], "limits.max_turn"),
        (["tasks=zero"], "tasks"),
        (["limits"], "--set expects key=value"),
    ],
)
def test_bad_config(tmp_path, sets, fragment) -> None:
    args = [a for s in sets for a in ("--set", s)]
    result = invoke("rollout", "guess_number", "--out", tmp_path / "x.jsonl", *args)
    assert_one_line_error(result, fragment)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--policy", "telepathy"], "unknown policy 'telepathy'"),
        (["--policy", "scripted", "--policy-opt", "colour=red"], "colour"),
        (["--policy", "replay", "--policy-opt", "path=/nonexistent/x.jsonl"], "/nonexistent"),
        (["--tokenizer", "/nonexistent/tokenizer"], "cannot load tokenizer"),
        (["--renderer", "html"], "renderer"),
        (["--groups", "0"], "--groups"),
        (["--concurrency", "0"], "--concurrency"),
    ],
)
def test_bad_rollout_options(tmp_path, args, fragment) -> None:
    result = invoke("rollout", "guess_number", "--out", tmp_path / "x.jsonl", *args)
    assert_one_line_error(result, fragment)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_server():
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.parametrize("server", ["refused", "silent"])
def test_policy_server_that_does_not_answer(tmp_path, server, request) -> None:
    port = _closed_port() if server == "refused" else request.getfixturevalue("silent_server")
    out = tmp_path / "x.jsonl"
    result = invoke(
        "rollout", "guess_number", "--groups", "2", "--group-size", "1", "--out", out,
        "--policy", "openai", "--policy-opt", f"url=http://127.0.0.1:{port}",
        "--policy-opt", "model=m", "--policy-opt", "retries=0", "--policy-opt", "timeout=1",
        "--retries", "0", "--no-progress", "--json-summary",
    )  # fmt: skip
    # Probed before the run: one line naming the server, no table of zeros, no store.
    assert_one_line_error(result, "policy server does not answer", f"127.0.0.1:{port}")
    assert result.stdout == "" and not out.exists()


# ---- view ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("view") / "g.jsonl"
    result = invoke(
        "rollout", "guess_number", "--groups", "2", "--group-size", "2", "--out", out,
        "--json-summary", "--set", "limits.max_turns=3",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return out


def test_view_terminal(stored) -> None:
    result = invoke("view", stored)
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    assert "2 (2 ok, 0 failed), 4 trajectories" in text
    assert "group 1" in text and "trajectory 1" in text
    assert "<guess>50</guess>" in text and "max_turns" in text
    only = invoke("view", stored, "--group", "1")
    assert "group 1" in only.stdout and "group 0 " not in only.stdout


def test_view_html_is_self_contained_and_marks_tokens(stored, tmp_path, tokenizer) -> None:
    import re

    page_path = tmp_path / "view.html"
    result = invoke("view", stored, "--html", page_path)
    assert result.exit_code == 0, result.stderr
    page = page_path.read_text()
    assert "<script>" in page and "<style>" in page
    assert "http://" not in page and "https://" not in page
    assert " src=" not in page and "<link" not in page
    data = json.loads(re.search(r'id="data">(.*?)</script>', page, re.DOTALL).group(1))
    records = [json.loads(line) for line in stored.read_text().splitlines()]
    assert [g["key"] for g in data["groups"]] == [r["key"] for r in records]
    trajectories = [t for r in records for t in r["trajectories"]]
    shown = [t for g in data["groups"] for t in g["trajs"]]
    assert len(shown) == len(trajectories) == 4
    for view, traj in zip(shown, trajectories, strict=True):
        sampled = "".join(s["t"] for s in view["spans"] if s["k"] == "s")
        assert sampled == "".join(tokenizer.decode(t["ac"]) for t in traj["transitions"])
        masked = "".join(s["t"] for s in view["spans"] if s["k"] in ("p", "e"))
        assert masked == "".join(tokenizer.decode(t["ob_new"]) for t in traj["transitions"])
        ids = [i for s in view["spans"] if s["k"] == "s" for i in s["ids"]]
        assert ids == [i for t in traj["transitions"] for i in t["ac"]]
    assert data["groups"][0]["est"]["estimator"] == "grpo"
    assert data["summary"]["stop_reasons"] == {"max_turns": 4} or data["summary"]["stop_reasons"]


def test_view_tolerates_a_torn_line_anywhere(stored, tmp_path) -> None:
    lines = stored.read_text().splitlines()
    path = tmp_path / "resumed.jsonl"
    path.write_text(lines[0] + "\n" + lines[1][:60] + "\n" + lines[1] + "\n")
    result = invoke("view", path)
    assert result.exit_code == 0, result.stderr
    assert "2 (2 ok, 0 failed)" in result.stdout
    assert (
        result.stderr.strip() == f"warning: {path}:2: skipped a torn line (a run was killed, "
        "or the disk filled, while writing it)"
    )


def test_view_limit_and_group_by_key(stored) -> None:
    first = invoke("view", stored, "--limit", "1")
    assert first.exit_code == 0 and "showing" in first.stdout and "1 of 2 groups" in first.stdout
    assert "group 0" in first.stdout and "group 1" not in first.stdout
    key = json.loads(stored.read_text().splitlines()[1])["key"]
    by_key = invoke("view", stored, "--group", key)
    assert by_key.exit_code == 0 and f"key {key}" in by_key.stdout
    assert "group 0 " not in by_key.stdout


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("[1, 2, 3]\n", ":1: not a trajectory record"),
        ("GOOD\n[1, 2, 3]\n", ":2: not a trajectory record (a JSON list)"),
        ('{"format": 1, "key": "a"}\n', ":1: not a trajectory record (missing field"),
        ('{"format": 99, "key": "a", "env": "", "task_id": ""}\n', "unsupported trajectory format"),
    ],
)
def test_view_rejects_corrupt_files(tmp_path, stored, content, fragment) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content.replace("GOOD", stored.read_text().splitlines()[0]))
    assert_one_line_error(invoke("view", path), fragment)


def test_view_tolerates_a_torn_last_line(stored, tmp_path) -> None:
    path = tmp_path / "torn.jsonl"
    text = stored.read_text()
    path.write_text(text + text.splitlines()[0][:50])  # a run killed mid-write
    result = invoke("view", path)
    assert result.exit_code == 0, result.stderr
    assert "2 (2 ok, 0 failed)" in result.stdout


def test_view_unreadable_inputs(tmp_path, stored) -> None:
    assert_one_line_error(invoke("view", tmp_path / "missing.jsonl"), "no such file")
    assert_one_line_error(invoke("view", tmp_path), "is a directory")
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert_one_line_error(invoke("view", binary), "not a trajectory store")
    assert_one_line_error(invoke("view", stored, "--group", "7"), "no group 7")


def test_view_names_a_tokenizer_it_cannot_load(tmp_path, stored) -> None:
    records = [json.loads(line) for line in stored.read_text().splitlines()]
    for r in records:
        r["provenance"]["tokenizer"]["spec"] = "/nonexistent/tokenizer"
    path = tmp_path / "other.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert_one_line_error(invoke("view", path), "/nonexistent/tokenizer", "--tokenizer")
    assert invoke("view", path, "--tokenizer", "builtin").exit_code == 0


# ---- demo and sub-apps ---------------------------------------------------------------------


def test_demo_runs_every_env_it_can(tmp_path) -> None:
    result = invoke("demo", "--out-dir", tmp_path)
    assert result.exit_code == 0, result.stdout + result.stderr
    names = [row["name"] for row in json.loads(invoke("list", "--json").stdout)]
    from agentenvs.envs.registry import config_class

    served = [n for n in names if config_class(n).needs_external_server]
    assert set(served) >= {"openenv", "mcp_tools"}  # left out, and said so on one line
    not_run = next(line for line in result.stdout.splitlines() if line.startswith("not run: "))
    for name in names:
        if name in served:
            assert name in not_run
        else:
            assert (tmp_path / f"demo-{name}.jsonl").exists(), name
    records = [json.loads(line) for line in (tmp_path / "demo-guess_number.jsonl").open()]
    assert records and all(r["status"] == "ok" for r in records)
    assert all(reward == 1.0 for r in records for reward in r["total_rewards"])
    assert (tmp_path / "demo-guess_number.html").read_text().startswith("<!DOCTYPE html>")


def test_demo_of_one_env_and_unknown_env(tmp_path) -> None:
    result = invoke("demo", "--out-dir", tmp_path, "--env", "guess_number")
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "demo-guess_number.html",
        "demo-guess_number.jsonl",
    ]
    assert_one_line_error(invoke("demo", "--out-dir", tmp_path, "--env", "nope"), "nope")


def test_subapps_are_mounted() -> None:
    from agentenvs.envs.references import load_ref
    from agentenvs.rollout.cli import SUBAPPS

    help_text = invoke("--help").stdout
    for name, reference in SUBAPPS.references().items():
        load_ref(reference)  # ours, with the install's extras: it must import
        assert name in help_text


def test_error_text_is_not_taken_as_markup(tmp_path) -> None:
    path = tmp_path / "[bold]x[/bold].jsonl"
    assert_one_line_error(invoke("view", path), "[bold]x[/bold].jsonl: no such file")


def test_a_sub_cli_that_fails_to_import_is_said_not_hidden(monkeypatch, caplog):
    """A missing optional extra leaves its group out quietly; a broken module is a warning."""
    import typer

    from agentenvs.envs.references import Registry
    from agentenvs.rollout import cli

    broken = {"broken": "agentenvs.no_such_module:app", "extra": "no_such_dependency_x:app"}
    monkeypatch.setattr(cli, "SUBAPPS", Registry("command group", broken))
    with caplog.at_level("WARNING"):
        assert cli.mount_subapps(typer.Typer()) == []
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "`agentenvs broken` is unavailable" in warned[0]
