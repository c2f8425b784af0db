"""The tree the HTML view carries for a tree-rollout group (``inspect/tree_page.py``),
built from real tree runs; a description it cannot draw becomes a note, never an error."""

from __future__ import annotations

import asyncio
import copy

from support.tree_helpers import SeededGuesser

from agentenvs.envs import make
from agentenvs.rollout.collect.collector import collect
from agentenvs.rollout.collect.tree import BranchSchedule, as_trees
from agentenvs.rollout.inspect.page_data import page_data
from agentenvs.rollout.inspect.tree_page import tree_data


def tree_records(tokenizer, *, groups: int = 3, roots: int = 2):
    config = make("guess_number", low=1, high=4, limits={"max_turns": 4})
    builders = [config.group_builder(task, roots, tokenizer) for task in range(groups)]
    schedule = BranchSchedule(branch_at=(2, 3), branch_factor=2)
    result = asyncio.run(
        collect(as_trees(builders, schedule), SeededGuesser(tokenizer, low=1, high=4))
    )
    assert not result.failed
    return result.records


def test_nodes_hold_values_gains_and_every_leaf_once(tokenizer):
    for record in tree_records(tokenizer):
        data = tree_data(record)
        leaves = record.extra["tree"]["leaves"]
        rewards = record.group.total_rewards()
        nodes = data["nodes"]
        assert len(data["roots"]) == 2
        assert sorted(n["leaf"] for n in nodes if n["leaf"] is not None) == list(range(len(leaves)))
        for node in nodes:
            under = [
                rewards[j] for j, leaf in enumerate(leaves)
                if leaf["root"] == node["root"] and leaf["path"][: len(node["path"])] == node["path"]
            ]  # fmt: skip
            assert node["leaves"] == len(under)
            assert abs(node["value"] - sum(under) / len(under)) < 1e-6
            for child in node["children"]:
                assert nodes[child]["path"][:-1] == node["path"]
                assert abs(nodes[child]["gain"] - (nodes[child]["value"] - node["value"])) < 1e-6
        points = {
            (leaf["root"], tuple(leaf["path"][:d])): leaf["branch_turns"][d]
            for leaf in leaves
            for d in range(len(leaf["path"]))
        }
        assert data["branch_points"] == len(points) == record.extra["tree"]["branch_points"]
        for node in nodes:
            if node["children"]:
                assert node["turn"] == points[(node["root"], tuple(node["path"]))]
        for j, leaf in enumerate(leaves):
            assert data["leaves"][j]["parent"] == leaf["parent"]
            assert nodes[data["leaves"][j]["node"]]["leaf"] == j


def test_a_group_without_a_tree_carries_none(tokenizer):
    config = make("guess_number", limits={"max_turns": 3})
    builders = [config.group_builder(0, 2, tokenizer)]
    record = asyncio.run(collect(builders, SeededGuesser(tokenizer))).records[0]
    assert tree_data(record) is None
    assert page_data([record], tokenizer)["groups"][0]["tree"] is None


def test_a_tree_it_cannot_draw_is_a_note(tokenizer):
    record, branched = next(
        (record, i)
        for record in tree_records(tokenizer)
        for i, leaf in enumerate(record.extra["tree"]["leaves"])
        if leaf["path"]
    )
    breakages = {
        "a leaf too few": lambda tree: tree["leaves"].pop(),
        "no path": lambda tree: tree["leaves"][0].pop("path"),
        "a path that is not a list": lambda tree: tree["leaves"][0].update(path=7),
        "branch turns cut short": lambda tree: tree["leaves"][branched].update(branch_turns=[]),
    }
    for name, breakage in breakages.items():
        broken = copy.deepcopy(record)
        breakage(broken.extra["tree"])
        data = tree_data(broken)
        assert set(data) == {"note"}, name
        assert data["note"].startswith("the tree description cannot be drawn"), name
        assert page_data([broken], tokenizer)["groups"][0]["tree"] == data
