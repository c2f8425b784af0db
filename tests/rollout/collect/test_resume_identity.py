"""Resume refuses a store made by a different run, and says what differs and what to do."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentenvs.envs import make
from agentenvs.rollout.cli import app
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.run_identity import RunMismatchError
from agentenvs.rollout.collect.store import TrajectoryStore, read_store
from agentenvs.rollout.policies import make_policy

runner = CliRunner()


def rollout(out: Path, *extra: str, groups: int = 3, size: int = 2):
    args = ["rollout", "guess_number", "--groups", str(groups), "--group-size", str(size),
            "--out", str(out), "--json-summary", "--no-progress", *extra]  # fmt: skip
    return runner.invoke(app, args, catch_exceptions=False)


def error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (["--set", "high=1000"], "config high: 100 in the store, 1000 now"),
        (["--group-size", "3"], "group_size: 2 in the store, 3 now"),
        (["--policy-opt", "variant=malformed"], '"variant": "oracle"'),
        (["--split", "test"], "split: train in the store, test now"),
    ],
)
def test_a_different_run_is_refused_with_what_differs(tmp_path, change, fragment) -> None:
    out = tmp_path / "g.jsonl"
    assert rollout(out).exit_code == 0
    before = out.read_bytes()
    extra = [a for a in change if a not in ("--group-size", "3")]
    size = 3 if "--group-size" in change else 2
    again = rollout(out, *extra, size=size)
    assert again.exit_code == 2, again.stdout
    line = error_line(again)
    assert fragment in line and "--new-run" in line and "another --out" in line
    assert out.read_bytes() == before  # nothing appended


def test_new_run_appends_a_second_run_that_resumes_on_its_own(tmp_path) -> None:
    out = tmp_path / "g.jsonl"
    assert rollout(out).exit_code == 0
    second = rollout(out, "--set", "high=1000", "--new-run")
    assert second.exit_code == 0, second.stderr
    summary = json.loads(second.stdout)
    assert (summary["groups"], summary["skipped"]) == (3, 0)  # the first run's keys do not count
    # The second run is now the store's latest: resuming it needs no flag and skips it all.
    third = rollout(out, "--set", "high=1000")
    assert third.exit_code == 0, third.stderr
    assert json.loads(third.stdout)["skipped"] == 3
    contents = read_store(out)
    runs = {r.run["fingerprint"] for r in contents.records}
    assert len(contents.records) == 6 and len(runs) == 2
    assert len(contents.latest()) == 6  # same keys, two runs: both kept


def test_the_python_api_refuses_a_cli_run_with_another_config(tmp_path) -> None:
    """The README's Python snippet run after its CLI quick start used to return 0 groups."""
    out = tmp_path / "guess.jsonl"
    assert rollout(out, groups=8, size=4).exit_code == 0
    from agentenvs.rollout.tokenizer import load_tokenizer

    config = make("guess_number", limits={"max_turns": 8})
    dataset = config.dataset(load_tokenizer("builtin"), group_size=4, n_groups=8)
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    store = TrajectoryStore(out)

    def run(**options):
        return asyncio.run(
            collect(builders, make_policy("scripted"), CollectOptions(concurrency=4, progress=False, **options), store=store)
        )  # fmt: skip

    with pytest.raises(RunMismatchError, match=r"config limits\.max_turns: 10 in the store, 8 now"):
        run()
    assert len(run(new_run=True).ok) == 8


def test_the_same_run_from_python_resumes_the_cli_run(tmp_path) -> None:
    out = tmp_path / "guess.jsonl"
    assert rollout(out, groups=4, size=2).exit_code == 0
    from agentenvs.rollout.tokenizer import load_tokenizer

    config = make("guess_number")
    dataset = config.dataset(load_tokenizer("builtin"), group_size=2, n_groups=6)
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    result = asyncio.run(
        collect(builders, make_policy("scripted"), CollectOptions(progress=False), store=TrajectoryStore(out))
    )  # fmt: skip
    assert (result.skipped, len(result.records)) == (4, 2)


def test_an_unknown_split_is_an_error(tmp_path) -> None:
    result = rollout(tmp_path / "g.jsonl", "--split", "tset")
    assert result.exit_code == 2
    assert "unknown split 'tset'" in error_line(result)
    assert not (tmp_path / "g.jsonl").exists()


def test_a_device_is_not_read_as_a_store(tmp_path) -> None:
    result = rollout(Path("/dev/full"))
    assert result.exit_code == 2
    assert "/dev/full: not a regular file" in error_line(result)


def test_retool_refuses_an_unknown_split() -> None:
    config = make("retool")
    assert config.num_tasks("train") > 0 and config.num_tasks("test") > 0
    with pytest.raises(ValueError, match="unknown split 'tset'; retool has train, eval"):
        config.num_tasks("tset")
