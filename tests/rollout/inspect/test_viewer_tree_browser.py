"""A tree rollout's page in a real browser: the tree, its branch points and values, and
navigation from leaf to parent, checked against the stored records."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support import machine_skips
from support.browser_cdp import open_browser
from support.tree_helpers import SeededGuesser
from typer.testing import CliRunner

from agentenvs.envs import make
from agentenvs.rollout.cli import app
from agentenvs.rollout.collect.collector import collect
from agentenvs.rollout.collect.store import TrajectoryStore, read_store
from agentenvs.rollout.collect.tree import BranchSchedule, as_trees

pytestmark = [
    machine_skips.needs("chromium"),
    pytest.mark.services,
]

runner = CliRunner()


@pytest.fixture(scope="module")
def tree_page(tmp_path_factory, tokenizer) -> tuple[Path, list]:
    """Trees whose leaves differ in reward: guessing 1..4 in four turns, branching at 2
    and 3 with seeded guesses per path, so some leaves find the number and some not."""
    folder = tmp_path_factory.mktemp("tree_browser")
    store = folder / "trees.jsonl"
    config = make("guess_number", low=1, high=4, limits={"max_turns": 4})
    builders = [config.group_builder(task, 1, tokenizer) for task in range(6)]
    schedule = BranchSchedule(branch_at=(2, 3), branch_factor=3)
    policy = SeededGuesser(tokenizer, low=1, high=4)
    result = asyncio.run(
        collect(as_trees(builders, schedule), policy, store=TrajectoryStore(store))
    )
    assert not result.failed
    html = folder / "trees.html"
    shown = runner.invoke(app, ["view", str(store), "--html", str(html)])
    assert shown.exit_code == 0, shown.output
    return html, read_store(store).records


def first_level_values(record) -> dict[int, float]:
    """Mean leaf reward under each child of the first branch point ({} for a tree whose
    root found the number before its first branch point)."""
    rewards = record.group.total_rewards()
    by_child: dict[int, list[float]] = {}
    for j, leaf in enumerate(record.extra["tree"]["leaves"]):
        if not leaf["path"]:
            continue
        by_child.setdefault(leaf["path"][0], []).append(rewards[j])
    return {child: sum(v) / len(v) for child, v in sorted(by_child.items())}


def spread(record) -> float:
    values = list(first_level_values(record).values())
    return max(values) - min(values) if values else 0.0


def texts(page, selector: str) -> list[str]:
    return page.evaluate(
        f"Array.from(document.querySelectorAll({json.dumps(selector)})).map(e => e.textContent)"
    )


def test_the_tree_shows_branch_points_values_and_parents(tree_page) -> None:
    html, records = tree_page
    with open_browser() as page:
        page.navigate(html.as_uri())
        page.wait_for("document.body && document.body.dataset.ready === '1'")
        # The group whose first-level branches differ most in value.
        index = max(range(len(records)), key=lambda i: spread(records[i]))
        assert spread(records[index]) > 0, "no tree with leaves of different rewards"
        page.click(f'#list tr.row[data-group="{index}"]')
        page.wait_for(f"document.getElementById('detail').dataset.group === '{index}'")
        record = records[index]
        tree = record.extra["tree"]
        rewards = record.group.total_rewards()

        # Branch points: one per distinct (root, path prefix) that splits, at its turn.
        points = {
            (leaf["root"], tuple(leaf["path"][:d]), leaf["branch_turns"][d])
            for leaf in tree["leaves"]
            for d in range(len(leaf["path"]))
        }
        shown = texts(page, "#detail section.tree .branch-point")
        assert len(shown) == len(points) == tree["branch_points"]
        # The page numbers turns as its streams do (from 0); the record from 1.
        assert sorted(int(t.split("turn ")[1].split()[0]) for t in shown) == sorted(
            turn - 1 for _, _, turn in points
        )

        # Every leaf once, with its reward and the leaf it was forked from.
        leaves = page.evaluate(
            "Array.from(document.querySelectorAll('#detail section.tree span.leaf'))"
            ".map(s => [Number(s.dataset.leaf), s.textContent])"
        )
        assert sorted(j for j, _ in leaves) == list(range(len(tree["leaves"])))
        for j, text in leaves:
            assert f"reward {rewards[j]:g}" in text
            parent = tree["leaves"][j]["parent"]
            if parent is None:
                assert "forked from" not in text
            else:
                turn = tree["leaves"][j]["branch_turn"] - 1
                assert f"forked from trajectory {parent} at turn {turn}" in text

        # Per-branch value: the mean reward of the leaves under each first-level branch.
        first_level = first_level_values(record)
        heads = page.evaluate(
            "Array.from(document.querySelectorAll('#detail ul.tree-roots > li > ul > li > "
            ".node-head')).map(h => h.textContent)"
        )
        assert len(heads) == len(first_level)
        for child, head in zip(sorted(first_level), heads, strict=True):
            mean = first_level[child]
            root = sum(rewards) / len(rewards)
            gain = mean - root
            sign = "+" if gain > 0 else ""
            assert head.startswith(f"branch {child} · value {mean:.4g} (gain {sign}{gain:.4g})")

        # Navigate: a leaf's parent button opens the parent's trajectory.
        child = next(j for j, leaf in enumerate(tree["leaves"]) if leaf["parent"] is not None)
        parent = tree["leaves"][child]["parent"]
        page.click(f'#detail span.leaf[data-leaf="{child}"] button.parent-link')
        page.wait_for(f"document.getElementById('detail').dataset.leaf === '{parent}'")
        assert page.evaluate(f"document.getElementById('g{index}t{parent}').open") is True
        assert page.evaluate(
            "Array.from(document.querySelectorAll('#detail details.traj.focus')).map(d => d.id)"
        ) == [f"g{index}t{parent}"]
        # The parent's stream marks where its own children left it, before the action.
        marked = page.evaluate(
            f"document.querySelectorAll('#g{index}t{parent} .turn.branch').length"
        )
        assert marked == len(tree["leaves"][parent]["branch_turns"])

        # The trajectory table names each leaf's parent.
        column = texts(page, "#detail table.trajectories tr td:nth-child(12)")
        expected = [
            "-" if leaf["parent"] is None else str(leaf["parent"]) for leaf in tree["leaves"]
        ]
        assert column == expected
        assert page.exceptions == []
