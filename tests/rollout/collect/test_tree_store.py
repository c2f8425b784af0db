"""Tree leaves stored once: a leaf refers to its parent for their shared prefix.

Real tree rollouts (guess_number, seeded policies) on the builtin tokenizer and on a
real vocabulary, written through the real store and read back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from support.tree_helpers import SeededGuesser
from support.vocab import shared_vocabulary
from typer.testing import CliRunner

from agentenvs.envs import make
from agentenvs.rollout.cli import app
from agentenvs.rollout.collect.collector import collect
from agentenvs.rollout.collect.store import StoreError, TrajectoryStore, read_store
from agentenvs.rollout.collect.tree import BranchSchedule, as_trees
from agentenvs.rollout.data.training_data import samples_from_records
from agentenvs.rollout.inspect.check import check_file

SCHEDULE = BranchSchedule(branch_at=(2, 3), branch_factor=3)


def tree_store(tokenizer, path, *, groups: int = 2, roots: int = 2, schedule=SCHEDULE):
    """A real tree run through the collector into a store at ``path``."""
    config = make("guess_number", limits={"max_turns": 6})
    builders = [config.group_builder(task, roots, tokenizer) for task in range(groups)]
    result = asyncio.run(
        collect(as_trees(builders, schedule), SeededGuesser(tokenizer), store=TrajectoryStore(path))
    )
    assert not result.failed
    return result.records


def as_lists(trajectory):
    """Everything a trajectory holds, as plain values, to compare token for token."""
    return (
        [
            (t.ob, t.ac.tokens, t.ac.logprobs, t.ac.stop_reason, t.reward, t.episode_done,
             t.metrics, t.logs)
            for t in trajectory.transitions
        ],
        trajectory.final_ob,
        trajectory.stop_reason,
    )  # fmt: skip


def assert_same_leaves(written, read) -> None:
    assert [r.key for r in written] == [r.key for r in read]
    for a, b in zip(written, read, strict=True):
        assert len(a.group.trajectories) == len(b.group.trajectories)
        for x, y in zip(a.group.trajectories, b.group.trajectories, strict=True):
            assert as_lists(x) == as_lists(y)
        assert a.group.group_rewards == b.group.group_rewards


@pytest.mark.parametrize("vocabulary", ["builtin", "qwen3"])
def test_leaves_round_trip_token_for_token_and_the_prefix_is_stored_once(
    vocabulary, tokenizer, tmp_path
):
    tok = tokenizer if vocabulary == "builtin" else shared_vocabulary(vocabulary)
    path = tmp_path / "trees.jsonl"
    written = tree_store(tok, path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line, record in zip(lines, written, strict=True):
        leaves = record.extra["tree"]["leaves"]
        children = [i for i, leaf in enumerate(leaves) if leaf["parent"] is not None]
        assert children, "the schedule branches every tree"
        assert line["format"] == 2
        for i, item in enumerate(line["trajectories"]):
            if i in children:
                ref = {"parent": leaves[i]["parent"], "branch_turn": leaves[i]["branch_turn"]}
                assert item["prefix_from"] == ref
                # Only its own turns are stored: from its branch turn on.
                turns = len(record.group.trajectories[i].transitions)
                assert len(item["transitions"]) == turns - ref["branch_turn"] + 1
                assert "ob_new" not in item["transitions"][0]
            else:
                assert "prefix_from" not in item
    read = read_store(path).records
    assert_same_leaves(written, read)
    # The same records with every leaf whole: what the store held before.
    whole = sum(len(json.dumps(r.to_json(share_prefixes=False))) for r in written)
    shared = sum(len(json.dumps(r.to_json())) for r in written)
    assert shared < whole
    # Reading and writing again gives the same line (nothing drifts on a rewrite).
    assert [r.to_json() | {"created": 0} for r in read] == [
        r.to_json() | {"created": 0} for r in written
    ]


def test_a_store_of_whole_leaves_still_reads_and_checks(tokenizer, tmp_path):
    path = tmp_path / "trees.jsonl"
    written = tree_store(tokenizer, path)
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps(r.to_json(share_prefixes=False)) + "\n" for r in written))
    assert all(json.loads(line)["format"] == 1 for line in old.read_text().splitlines())
    read = read_store(old).records
    assert_same_leaves(written, read)
    assert all(not r.stored_prefixes for r in read)
    findings = [f for f in check_file(old).findings if f.detail.startswith("tree ")]
    assert [f.status for f in findings] == ["pass", "pass"]
    assert "stored by reference" not in findings[1].detail
    findings = [f for f in check_file(path).findings if f.detail.startswith("tree ")]
    assert [f.status for f in findings] == ["pass", "pass"]
    assert "stored by reference" in findings[1].detail


def test_training_samples_are_the_same_from_either_form(tokenizer, tmp_path):
    path = tmp_path / "trees.jsonl"
    written = tree_store(tokenizer, path)
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps(r.to_json(share_prefixes=False)) + "\n" for r in written))

    def samples(store):
        made, metadata = samples_from_records(read_store(store).records)
        return [dataclasses.asdict(s) for s in made], metadata

    assert samples(path) == samples(old)


def rewrite(path, target, edit) -> None:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    edit(lines)
    target.write_text("".join(json.dumps(item) + "\n" for item in lines))


def first_child(line) -> int:
    return next(i for i, t in enumerate(line["trajectories"]) if "prefix_from" in t)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda ref, parent_turns: ref.update(branch_turn=parent_turns + 1),
            "is beyond its parent",
        ),
        (lambda ref, parent_turns: ref.update(branch_turn=0), "turns count from 1"),
        (lambda ref, parent_turns: ref.update(parent=99), "not an earlier trajectory"),
        (lambda ref, parent_turns: ref.update(parent="0"), "integer parent"),
    ],
)
def test_a_reference_that_cannot_be_restored_is_refused_naming_the_line(
    edit, message, tokenizer, tmp_path
):
    path = tmp_path / "trees.jsonl"
    written = tree_store(tokenizer, path, groups=1)
    bad = tmp_path / "bad.jsonl"

    def corrupt(lines):
        child = first_child(lines[0])
        ref = lines[0]["trajectories"][child]["prefix_from"]
        edit(ref, len(written[0].group.trajectories[ref["parent"]].transitions))

    rewrite(path, bad, corrupt)
    with pytest.raises(StoreError, match=f"bad.jsonl:1: .*{message}"):
        check_file(bad)
    # The command says so too, naming the file and line, without a traceback.
    result = CliRunner().invoke(app, ["check", str(bad)])
    assert result.exit_code != 0
    assert "bad.jsonl:1:" in result.output and message in result.output
    assert "Traceback" not in result.output


def test_check_catches_a_reference_that_disagrees_with_the_tree(tokenizer, tmp_path):
    path = tmp_path / "trees.jsonl"
    tree_store(tokenizer, path, groups=1, roots=1)
    bad = tmp_path / "bad.jsonl"

    def sibling_as_parent(lines):
        # Two siblings j < i left parent p at the same turn, so j shares p's prefix up
        # to it: naming j as i's parent restores the same tokens, but is not the tree.
        refs = {
            i: t["prefix_from"]
            for i, t in enumerate(lines[0]["trajectories"])
            if "prefix_from" in t
        }
        i, j = next((i, j) for i in refs for j in refs if j < i and refs[j] == refs[i])
        refs[i]["parent"] = j

    rewrite(path, bad, sibling_as_parent)
    failed = [f for f in check_file(bad).findings if f.status == "fail"]
    assert any("tree structure" in f.detail and "but the tree names" in f.detail for f in failed)

    def no_tree(lines):
        del lines[0]["extra"]["tree"]

    rewrite(path, bad, no_tree)
    failed = [f for f in check_file(bad).findings if f.status == "fail"]
    assert any("stored by reference but no tree" in f.detail for f in failed)


def test_a_leaf_that_does_not_share_its_parents_prefix_is_stored_whole(tokenizer, tmp_path):
    path = tmp_path / "trees.jsonl"
    written = tree_store(tokenizer, path, groups=1, roots=1)
    record = written[0]
    child = next(i for i, leaf in enumerate(record.extra["tree"]["leaves"]) if leaf["parent"])
    # A broken fork: the child's first action differs from its parent's (a new
    # transition: the tree's leaves share their prefix's transition objects).
    transitions = record.group.trajectories[child].transitions
    first = transitions[0]
    tokens = [first.ac.tokens[0] + 1, *first.ac.tokens[1:]]
    transitions[0] = dataclasses.replace(first, ac=dataclasses.replace(first.ac, tokens=tokens))
    line = record.to_json()
    assert "prefix_from" not in line["trajectories"][child]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(line) + "\n")
    failed = [f for f in check_file(bad).findings if f.status == "fail"]
    assert any("shared prefix" in f.detail and "before the branch" in f.detail for f in failed)
