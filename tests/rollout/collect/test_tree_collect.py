"""Tree rollouts through the collector and the CLI: stored trees, resume, summary, check."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from agentenvs.rollout.cli import app
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.inspect.check import check_file

runner = CliRunner()


def cli(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def rollout(out, *extra):
    return cli(
        "rollout", "guess_number", "--groups", 3, "--group-size", 1, "--out", out,
        "--set", "limits.max_turns=6", "--json-summary", *extra,
    )  # fmt: skip


def test_cli_summary_reports_leaves_forks_and_one_trajectory_per_leaf(tmp_path):
    out = tmp_path / "trees.jsonl"
    result = rollout(out, "--branch-factor", 3, "--branch-at", "1,2")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    records = [GroupRecord.from_json(json.loads(line)) for line in out.read_text().splitlines()]
    leaves = sum(len(r.extra["tree"]["leaves"]) for r in records)
    assert summary["leaves"] == summary["trajectories"] == leaves
    assert summary["forks"] == leaves - summary["roots"] == leaves - 3
    assert summary["fork_failures"] == 0
    for record in records:
        assert len(record.group.trajectories) == len(record.extra["tree"]["leaves"])
        assert record.extra["tree"]["schedule"]["branch_at"] == [1, 2]
        assert len(record.extra["tree_advantages"]["tree_segment"]) == len(
            record.group.trajectories
        )
    # A rerun resumes per tree: every tree is stored, none is grown again.
    again = rollout(out, "--branch-factor", 3, "--branch-at", "1,2")
    assert json.loads(again.stdout.strip().splitlines()[-1])["skipped"] == 3
    assert len(out.read_text().splitlines()) == 3


def test_check_passes_on_trees_and_catches_a_broken_prefix_or_parent(tmp_path):
    out = tmp_path / "trees.jsonl"
    assert rollout(out, "--branch-factor", 2, "--branch-at", "2,3").exit_code == 0
    report = check_file(out)
    trees = [f for f in report.findings if f.detail.startswith("tree ")]
    assert [f.status for f in trees] == ["pass", "pass"]

    # Leaves stored whole (format 1, as older stores hold them), so a prefix can differ;
    # tests/rollout/collect/test_tree_store.py covers leaves stored by reference.
    records = [GroupRecord.from_json(json.loads(line)) for line in out.read_text().splitlines()]
    lines = [record.to_json(share_prefixes=False) for record in records]
    broken = json.loads(json.dumps(lines))
    leaf = next(i for i, item in enumerate(broken[0]["extra"]["tree"]["leaves"]) if item["parent"])
    broken[0]["trajectories"][leaf]["transitions"][0]["ac"][0] += 1  # before the branch turn
    bad = tmp_path / "bad_prefix.jsonl"
    bad.write_text("".join(json.dumps(item) + "\n" for item in broken))
    failed = [f for f in check_file(bad).findings if f.status == "fail"]
    assert any("shared prefix" in f.detail and "before the branch" in f.detail for f in failed)

    broken = json.loads(json.dumps(lines))
    broken[0]["extra"]["tree"]["leaves"][leaf]["parent"] = leaf
    bad = tmp_path / "bad_parent.jsonl"
    bad.write_text("".join(json.dumps(item) + "\n" for item in broken))
    failed = [f for f in check_file(bad).findings if f.status == "fail"]
    assert any("tree structure" in f.detail and "not another leaf" in f.detail for f in failed)


def test_tree_options_without_a_branch_point_are_refused(tmp_path):
    result = rollout(tmp_path / "x.jsonl", "--branch-factor", 3)
    assert result.exit_code != 0 and "--branch-at" in result.output
    result = rollout(tmp_path / "x.jsonl", "--branch-at", "a,b")
    assert result.exit_code != 0 and "turn numbers" in result.output
    result = rollout(tmp_path / "x.jsonl", "--branch-at", "1", "--branch-factor", 1)
    assert result.exit_code != 0 and "branch_factor" in result.output
