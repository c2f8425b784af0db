"""`check` on rewards: a clean store passes; a changed reward, or an unread verdict, fails.

The stores are real collections (guess_number, scripted oracle); each corruption is
what happens in practice: a run appended after someone edited the grader (its
records name another version, or the same version with other code), a second store
collected with another reward, a judge whose answer held no score.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentenvs.envs import make
from agentenvs.rollout.cli import app
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore, read_records
from agentenvs.rollout.inspect.check import Check, check_records
from agentenvs.rollout.inspect.reward_checks import compare_reward_identities
from agentenvs.rollout.policies.scripted import ScriptedPolicy
from agentenvs.rollout.tokenizer import train_chatml_tokenizer


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rewards") / "run.jsonl"
    tokenizer = train_chatml_tokenizer()
    dataset = make("guess_number", tasks=4).dataset(tokenizer, group_size=2)
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    asyncio.run(
        collect(builders, ScriptedPolicy(), CollectOptions(progress=False), store=TrajectoryStore(path))
    )  # fmt: skip
    return path


def _edited(store: Path, out: Path, edit) -> Path:
    lines = [json.loads(line) for line in store.read_text().splitlines() if line.strip()]
    for index, line in enumerate(lines):
        edit(index, line)
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return out


def _reward_findings(path: Path):
    report = check_records(read_records(path))
    return report, report.by_check(Check.REWARDS)


def test_a_clean_store_names_its_reward_and_passes(store):
    report, findings = _reward_findings(store)
    assert report.ok and [f.status for f in findings] == ["pass"], findings
    assert "guess@1" in findings[0].detail


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [("version", "2", "version: 1 -> 2"), ("code_sha256", "f" * 16, "code_sha256: ")],
)
def test_a_reward_edited_between_runs_of_one_store_fails(store, tmp_path, field, value, shown):
    def edit(index, line):
        if index >= 2:  # the later run: its records name the edited reward
            line["provenance"]["reward"]["components"][0][field] = value
            line["run"]["fingerprint"] = "later-run"

    report, (finding,) = _reward_findings(_edited(store, tmp_path / "e.jsonl", edit))
    assert not report.ok and finding.status == "fail"
    assert "'guess' of guess_number changed" in finding.detail and shown in finding.detail
    assert "run later-run" in finding.where


def test_a_store_from_before_reward_provenance_warns(store, tmp_path):
    path = _edited(store, tmp_path / "old.jsonl", lambda i, line: line["provenance"].pop("reward"))
    report, (finding,) = _reward_findings(path)
    assert report.ok and finding.status == "warn"


def test_an_unparsed_judge_verdict_fails_quoting_it(store, tmp_path):
    def edit(index, line):
        logs = line["trajectories"][0]["transitions"][-1]["logs"]
        logs["judge/status"] = "ok"
        if index == 1:
            logs.update({"judge/status": "no_score", "judge/verdict": "I think it is fine"})

    report, findings = _reward_findings(_edited(store, tmp_path / "j.jsonl", edit))
    failed = [f for f in findings if f.status == "fail"]
    assert not report.ok and len(failed) == 1, findings
    assert "1 of 4 judged episodes" in failed[0].detail and "no_score" in failed[0].detail
    assert "I think it is fine" in failed[0].detail and "traj 0" in failed[0].where


def test_against_another_store_compares_reward_code(store, tmp_path):
    def bump(index, line):
        line["provenance"]["reward"]["components"][0]["version"] = "2"

    other = _edited(store, tmp_path / "other.jsonl", bump)
    records = read_records(store)
    (same,) = compare_reward_identities(records, records, "itself")
    assert same.status == "pass"
    (differs,) = compare_reward_identities(records, read_records(other), "other.jsonl")
    assert differs.status == "fail" and "version: 2 -> 1" in differs.detail

    runner = CliRunner()
    passed = runner.invoke(app, ["check", str(store), "--against", str(store), "--json"])
    assert passed.exit_code == 0, passed.output
    failed = runner.invoke(app, ["check", str(store), "--against", str(other), "--json"])
    assert failed.exit_code == 1, failed.output
    details = [f["detail"] for f in json.loads(failed.output)["findings"] if f["status"] == "fail"]
    assert any("differs from" in d and "version" in d for d in details), details
    missing = runner.invoke(app, ["check", str(store), "--against", str(tmp_path / "none")])
    assert missing.exit_code != 0 and "no such file" in missing.output
