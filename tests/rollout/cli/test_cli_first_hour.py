"""A newcomer's first hour with the command, issue #30: each mistake or accident ends
in a message that says what happened and what to do, before time is wasted.

Every test here failed before its fix (what it caught is said in each docstring).
The environments that misbehave on purpose come from ``conftest.plugin_site``, a
real installed distribution found through its entry point.
"""

from __future__ import annotations

import json
import re
import socket

from conftest import PLUGIN, run_cli
from typer.testing import CliRunner

from agentenvs.rollout.cli import app

runner = CliRunner()

BUG_LINE = next(n for n, line in enumerate(PLUGIN.splitlines(), 1) if 'table["oops"]' in line)


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error: ")]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- 1. a bug in an environment's step --------------------------------------------------------


def test_a_bug_in_step_names_its_line_is_stored_with_its_traceback_and_not_retried(
    plugin_site, tmp_path
) -> None:
    """Before: ``KeyError: 'oops'`` and nothing else, tried 3 times (--retries 2)."""
    out = tmp_path / "b.jsonl"
    ran = run_cli(
        ["rollout", "buggy", "--groups", "2", "--group-size", "2", "--retries", "2",
         "--out", out, "--no-progress"],
        tmp_path, site=plugin_site,
    )  # fmt: skip
    assert ran.code == 1, ran.stderr
    (line,) = error_lines(ran.stderr)
    assert "2 of 2 groups failed" in line and "KeyError: 'oops'" in line
    assert f"agentenvs_misbehaving.py:{BUG_LINE} in step" in line
    assert "not retried" in line and "--debug" in line
    assert "Traceback" not in ran.stderr  # one line without --debug
    records = [json.loads(text) for text in out.read_text().splitlines()]
    assert [r["attempts"] for r in records] == [1, 1]  # deterministic: tried once
    for record in records:  # the field the viewer shows
        assert record["traceback"].startswith("Traceback (most recent call last):")
        assert f'agentenvs_misbehaving.py", line {BUG_LINE}, in step' in record["traceback"]
        assert 'return table["oops"]' in record["traceback"]

    debug = run_cli(
        ["rollout", "buggy", "--groups", "1", "--group-size", "1", "--out", tmp_path / "d.jsonl",
         "--no-progress", "--debug"],
        tmp_path, site=plugin_site,
    )  # fmt: skip
    assert debug.code == 1
    assert "Traceback (most recent call last):" in debug.stderr
    assert 'return table["oops"]' in debug.stderr and "KeyError: 'oops'" in debug.stderr


def test_debug_shows_the_traceback_of_a_bad_input_error(tmp_path) -> None:
    """Before: no ``--debug`` at all."""
    plain = invoke("rollout", "nosuch_env", "--out", tmp_path / "x.jsonl")
    assert plain.exit_code == 2 and "Traceback" not in plain.stderr
    debug = invoke("rollout", "nosuch_env", "--out", tmp_path / "x.jsonl", "--debug")
    assert debug.exit_code == 2
    assert "Traceback (most recent call last):" in debug.stderr
    assert error_lines(debug.stderr)[-1].startswith("error: unknown environment 'nosuch_env'")


# ---- 5. splits --------------------------------------------------------------------------------


def test_a_split_the_environment_does_not_declare_is_refused(plugin_site, tmp_path) -> None:
    """Before: an env that ignores ``split`` ran its train tasks for ``--split tset``, exit 0."""
    ran = run_cli(
        ["rollout", "splitless", "--split", "tset", "--out", tmp_path / "s.jsonl"],
        tmp_path, site=plugin_site,
    )  # fmt: skip
    assert ran.code == 2
    assert error_lines(ran.stderr) == [
        "error: --split: unknown split 'tset' for splitless; its splits: train, test"
    ]
    assert not (tmp_path / "s.jsonl").exists()
    ok = run_cli(
        ["rollout", "splitless", "--split", "test", "--groups", "1", "--group-size", "1",
         "--out", tmp_path / "t.jsonl", "--json-summary"],
        tmp_path, site=plugin_site,
    )  # fmt: skip
    assert ok.code == 0 and json.loads(ok.stdout)["ok"] == 1


# ---- 6. options validated early and said as flags ---------------------------------------------


def test_url_with_the_openai_policy_is_the_policy_servers(tmp_path) -> None:
    """Before: taken as the sandbox's URL (``sandbox: Extra inputs are not permitted``)."""
    port = _closed_port()
    result = invoke(
        "rollout", "guess_number", "--policy", "openai", "--url", f"http://127.0.0.1:{port}",
        "--out", tmp_path / "x.jsonl",
    )  # fmt: skip
    assert result.exit_code == 2
    (line,) = error_lines(result.stderr)
    assert f"policy server does not answer: http://127.0.0.1:{port}" in line
    both = invoke(
        "rollout", "guess_number", "--policy", "openai", "--url", "http://a:1",
        "--policy-opt", "url=http://b:1", "--out", tmp_path / "x.jsonl",
    )  # fmt: skip
    assert error_lines(both.stderr) == [
        "error: --url and --policy-opt url=... both name the policy server"
    ]


def test_openai_without_a_url_says_which_flag_to_pass(tmp_path) -> None:
    """Before: ``url: Field required`` with no hint."""
    result = invoke("rollout", "guess_number", "--policy", "openai", "--out", tmp_path / "x")
    assert result.exit_code == 2
    (line,) = error_lines(result.stderr)
    assert "--policy openai" in line and "option url is required" in line
    assert "--policy-opt url=http://127.0.0.1:8000" in line and "--url" in line


def test_an_unknown_scripted_variant_is_refused_before_the_run(tmp_path) -> None:
    """Before: every group retried and failed, exit 1, a store of failures."""
    out = tmp_path / "v.jsonl"
    result = invoke("rollout", "guess_number", "--policy-opt", "variant=wrong", "--out", out)
    assert result.exit_code == 2
    assert error_lines(result.stderr) == [
        "error: --policy-opt variant=wrong: environment GuessNumberEnv has no scripted variant "
        "'wrong' (every scripted environment offers 'oracle')"
    ]
    assert not out.exists()
    # A variant the env has still runs.
    fine = invoke(
        "rollout", "guess_number", "--policy-opt", "variant=malformed", "--groups", "1",
        "--group-size", "1", "--out", out, "--json-summary",
    )  # fmt: skip
    assert fine.exit_code == 0 and json.loads(fine.stdout)["ok"] == 1


def test_an_unknown_policy_is_reported_before_the_tokenizer_loads(tmp_path) -> None:
    """Before: the tokenizer loaded first (11-13 s), so a bad tokenizer was reported
    instead; now the policy is checked before any tokenizer is touched."""
    result = invoke(
        "rollout", "guess_number", "--policy", "nosuch", "--tokenizer", tmp_path / "missing",
        "--out", tmp_path / "x.jsonl",
    )  # fmt: skip
    assert result.exit_code == 2
    (line,) = error_lines(result.stderr)
    assert line.startswith("error: --policy: unknown policy 'nosuch'; choose one of hf,")
    bad_option = invoke(
        "rollout", "guess_number", "--policy-opt", "varient=oracle", "--tokenizer",
        tmp_path / "missing", "--out", tmp_path / "x.jsonl",
    )  # fmt: skip
    assert "unknown option(s) varient for policy 'scripted'" in error_lines(bad_option.stderr)[0]


def test_a_bad_nested_key_lists_the_keys_of_its_own_level(tmp_path) -> None:
    """Before: ``--set limits.bogus=1`` listed the top-level keys (high, limits, low...)."""
    result = invoke("rollout", "guess_number", "--set", "limits.bogus=1", "--out", tmp_path / "x")
    (line,) = error_lines(result.stderr)
    assert "limits.bogus: Extra inputs are not permitted" in line
    listed = line.split("Accepted keys under limits: ")[1].split(", ")
    assert "max_turns" in listed and "max_tokens_per_turn" in listed
    assert "high" not in listed and "low" not in listed
    top = invoke("rollout", "guess_number", "--set", "bogus=1", "--out", tmp_path / "x")
    assert "Accepted keys: high, limits, low" in error_lines(top.stderr)[0]


# ---- 7. statistics that do not exist ----------------------------------------------------------


def test_a_run_with_no_trajectory_prints_dashes_not_zeros(plugin_site, tmp_path) -> None:
    """Before: ``reward mean ± std 0.0000 ± 0.0000``, ``mean turns 0.00``, ``episodes/s 0.00``."""
    ran = run_cli(
        ["rollout", "buggy", "--groups", "1", "--group-size", "1", "--out", tmp_path / "b.jsonl",
         "--no-progress"],
        tmp_path, site=plugin_site, env={"COLUMNS": "120"},
    )  # fmt: skip
    rows = {
        cells[0]: cells[1]
        for line in ran.stdout.splitlines()
        if len(cells := [c.strip() for c in re.split(r"[│|]", line) if c.strip()]) == 2
    }
    for label in ("reward mean ± std", "zero-advantage groups", "episodes/s", "mean turns"):
        assert rows[label] == "-", (label, ran.stdout)
    assert rows["failed"] == "1"
    as_json = run_cli(
        ["rollout", "buggy", "--groups", "1", "--group-size", "1", "--out", tmp_path / "c.jsonl",
         "--json-summary"],
        tmp_path, site=plugin_site,
    )  # fmt: skip
    summary = json.loads(as_json.stdout)
    assert summary["mean_reward"] is None and summary["mean_turns"] is None


# ---- 9. the smaller ones ----------------------------------------------------------------------


def test_view_of_an_empty_file_fails_as_check_does(tmp_path) -> None:
    """Before: ``view`` of an empty file exited 0 while ``check`` failed it."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    viewed = invoke("view", empty, "--no-pager")
    assert viewed.exit_code == 2
    assert error_lines(viewed.stderr) == [f"error: {empty}: no trajectory records in the file"]
    assert invoke("check", empty).exit_code != 0


def test_view_of_a_scripted_run_shows_no_mean_logprob(tmp_path) -> None:
    """Before: ``mean logprob 0.0000`` on every turn (the oracle returned 0.0 per token)."""
    out = tmp_path / "s.jsonl"
    assert invoke("rollout", "guess_number", "--groups", "1", "--group-size", "1", "--out", out,
                  "--no-progress").exit_code == 0  # fmt: skip
    viewed = runner.invoke(app, ["view", str(out), "--no-pager"], env={"COLUMNS": "160"})
    assert viewed.exit_code == 0, viewed.output
    header = next(line for line in viewed.output.splitlines() if "mean logprob" in line)
    names = [c.strip() for c in header.split("┃")]
    column = names.index("mean logprob")
    rows = [
        cells
        for line in viewed.output.splitlines()
        if len(cells := [c.strip() for c in line.split("│")]) == len(names)
    ]
    assert rows and all(row[column] == "-" for row in rows), viewed.output
    assert "0.0000" not in viewed.output


def test_off_a_terminal_a_run_prints_periodic_progress_lines(tmp_path) -> None:
    """Before: silent until the end when stderr is not a terminal (CI, a log file)."""
    ran = run_cli(
        ["rollout", "guess_number", "--groups", "10", "--group-size", "1", "--out",
         tmp_path / "p.jsonl"],
        tmp_path, env={"AGENTENVS_PROGRESS_SECONDS": "0"},
    )  # fmt: skip
    assert ran.code == 0, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.startswith("groups ")]
    assert [line.split(" done")[0] for line in lines] == [f"groups {n}/10" for n in range(1, 11)]
    assert "\x1b" not in ran.stderr
    quiet = run_cli(
        ["rollout", "guess_number", "--groups", "2", "--group-size", "1", "--out",
         tmp_path / "q.jsonl", "--no-progress"],
        tmp_path, env={"AGENTENVS_PROGRESS_SECONDS": "0"},
    )  # fmt: skip
    assert "groups " not in quiet.stderr


def test_retriever_index_prints_no_debug_lines(tmp_path) -> None:
    """Before: ``DEBUG bm25s: Building index from tokens`` (bm25s sets its logger to DEBUG)."""
    ran = run_cli(["retriever", "index", "--out", tmp_path / "idx"], tmp_path, timeout=300)
    assert ran.code == 0, ran.stderr
    assert "DEBUG" not in ran.stderr + ran.stdout
    assert "bm25 index written to" in ran.stdout + ran.stderr


def test_list_at_80_columns_keeps_identifiers_whole(terminal, tmp_path) -> None:
    """Before: ``agentenvs.envs.a`` / ``lfworld.config:A`` / ``LFWorldConfig`` in a column."""
    from agentenvs.rollout.cli.listing import registered_envs

    term = terminal(["list"], tmp_path, columns=80)
    assert term.wait() == 0
    lines = term.plain.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines)
    for row in registered_envs():
        assert any(row.entry_point in line for line in lines), (row.entry_point, term.plain)
        assert any(row.name in line for line in lines)
    wide = terminal(["list"], tmp_path, columns=200)
    assert wide.wait() == 0 and "entry point" in wide.plain and "┏" in wide.plain


def test_demo_table_wraps_no_word_at_80_columns() -> None:
    """Before: ``compl`` / ``eted:``, ``groups`` / ``ok``, ``epis…`` at 80 columns."""
    from rich.console import Console

    from agentenvs.rollout.cli.demo import DemoOutcome, outcome_table

    outcomes = [
        DemoOutcome("guess_number", "ok", {"ok": 4, "failed": 0, "trajectories": 8,
                    "mean_reward": 1.0, "stop_reasons": {"completed": 8}}, seconds=1.2),
        DemoOutcome("alfworld", "unavailable", message="no engine"),
        DemoOutcome("search_r1", "ok", {"ok": 4, "failed": 0, "trajectories": 8,
                    "mean_reward": 0.5, "stop_reasons": {"completed": 6, "max_turns": 1,
                    "context_overflow": 1}}, seconds=13.2),
    ]  # fmt: skip
    console = Console(width=80, record=True, color_system=None)
    console.print(outcome_table(outcomes))
    text = console.export_text()
    words = {w for line in text.splitlines() for w in line.split()}
    for expected in ("guess_number", "unavailable", "search_r1", "context_overflow:",
                     "completed:", "max_turns:", "episodes", "failed", "13.2s", "1.000"):  # fmt: skip
        assert expected in words, (expected, text)
    assert "…" not in text


def test_interactive_policy_draws_no_progress_bar_over_the_prompt(terminal, tmp_path) -> None:
    """Before: the rich bar (``groups ━━━ 0/1``) redrew itself over ``your action>``."""
    term = terminal(
        ["rollout", "guess_number", "--policy", "interactive", "--groups", "1", "--group-size",
         "1", "--set", "limits.max_turns=1", "--out", tmp_path / "i.jsonl"],
        tmp_path,
    )  # fmt: skip
    shown = term.read_until(lambda text: "your action>" in text)
    assert "your action>" in shown
    term.type("<guess>50</guess>\n")
    assert term.wait() in (0, 1)
    assert "0/1" not in term.text and "━" not in term.text


def test_ctrl_c_says_what_is_stored_and_that_a_rerun_resumes(terminal, tmp_path) -> None:
    """Before: Ctrl-C printed nothing (or a traceback)."""
    out = tmp_path / "long.jsonl"
    # Long enough that the run cannot end before the bar shows progress and Ctrl-C lands
    # (3,000 groups once finished in 4.8 s, before the interrupt: exit 0, nothing to test).
    args = ["rollout", "guess_number", "--groups", "30000", "--group-size", "1",
            "--concurrency", "1", "--out", out]  # fmt: skip
    term = terminal(args, tmp_path)
    term.read_until(lambda text: re.search(r"groups .* [1-9]\d*/30000", text) is not None)
    term.interrupt()
    code = term.wait()
    assert code == 130, term.text
    match = re.search(r"interrupted: (\d+) groups? of this run stored in (\S+); rerun the same "
                      r"command to resume \(stored groups are skipped\)", term.text)  # fmt: skip
    assert match, term.text
    stored = int(match.group(1))
    assert 0 < stored < 30000 and match.group(2) == str(out)
    assert "Traceback" not in term.text
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert len([r for r in kept if r["status"] == "ok"]) == stored


def test_every_server_of_a_comma_separated_url_is_probed(tmp_path) -> None:
    """``url=http://a,http://b`` spreads turns over both; both must answer."""
    first, second = _closed_port(), _closed_port()
    result = invoke(
        "rollout", "guess_number", "--policy", "openai", "--policy-opt",
        f"url=http://127.0.0.1:{first},http://127.0.0.1:{second}", "--out", tmp_path / "x",
    )  # fmt: skip
    (line,) = error_lines(result.stderr)
    assert f"127.0.0.1:{first} (" in line and f"127.0.0.1:{second} (" in line
