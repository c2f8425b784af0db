"""``agentenvs check`` for tree rollouts: the tree is well formed and siblings share their past.

A tree group's record says, in ``extra["tree"]``, how its leaves (the trajectories)
relate (``collect/tree.py``). Two things must hold before training on it:

* **structure**: one description per trajectory; paths unique within a root; every
  leaf that left a parent names one of the same root, whose path agrees with its own
  up to the branch point and which was the first child there; branch turns strictly
  increase along a path and fall inside both trajectories; forks made equal leaves
  minus roots (each fork adds exactly one leaf);
* **shared prefix**: up to its branch turn a leaf is its parent, token for token:
  every earlier transition (observation, action tokens, logprobs) and the branch
  turn's observation. A difference there means a fork did not copy its past, and
  the sibling comparison the tree advantages make is void.

A leaf stored by reference (``collect/shared_prefix.py``) is restored from its
parent, so its prefix holds by construction; what can still be wrong is the
reference itself. A reference that cannot be restored (a branch turn beyond the
parent's length, a parent that is not an earlier leaf) makes the store unreadable,
with a message naming the line and leaf; one that can be restored but disagrees with
the tree description (another parent, another turn) is a structure failure here.

Both report under ``fixed_trajectory``. Records without a tree produce no finding at all,
so ordinary runs read as before.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.inspect.findings import Check, Finding
from agentenvs.rollout.inspect.groups import FirstFailure, GroupView


def _structure_problem(record: GroupRecord, tree: dict[str, Any]) -> str | None:
    assert record.group is not None
    trajectories = record.group.trajectories
    leaves = tree.get("leaves")
    if not isinstance(leaves, list) or len(leaves) != len(trajectories):
        return f"the tree describes {len(leaves or [])} leaves for {len(trajectories)} trajectories"
    roots = int(tree.get("roots", 0))
    seen: set[tuple[int, tuple[int, ...]]] = set()
    for i, leaf in enumerate(leaves):
        root, path, turns = int(leaf["root"]), tuple(leaf["path"]), list(leaf["branch_turns"])
        where = f"leaf {i}"
        if not 0 <= root < roots:
            return f"{where}: root {root} outside 0..{roots - 1}"
        if (root, path) in seen:
            return f"{where}: path {list(path)} appears twice in root {root}"
        seen.add((root, path))
        if len(turns) != len(path) or any(b <= a for a, b in itertools.pairwise(turns)):
            return f"{where}: branch turns {turns} do not match path {list(path)}"
        if turns and turns[-1] > len(trajectories[i].transitions):
            return f"{where}: branch turn {turns[-1]} after its last turn"
        parent = leaf.get("parent")
        if not any(path):
            if parent is not None:
                return f"{where}: a first-born leaf names parent {parent}"
            continue
        if not isinstance(parent, int) or not 0 <= parent < len(leaves) or parent == i:
            return f"{where}: parent {parent!r} is not another leaf"
        other = leaves[parent]
        depth = max(d for d, child in enumerate(path) if child)
        theirs = tuple(other["path"])
        if int(other["root"]) != root or theirs[:depth] != path[:depth]:
            return f"{where}: parent {parent} is on another branch"
        if len(theirs) <= depth or theirs[depth] != 0 or any(theirs[depth + 1 :]):
            return f"{where}: parent {parent} did not continue the forked episode"
        if leaf.get("branch_turn") != turns[depth] or other["branch_turns"][depth] != turns[depth]:
            return f"{where}: branch turn {leaf.get('branch_turn')} disagrees with the path"
    forks = tree.get("forks")
    if forks is not None and int(forks) != len(leaves) - roots:
        return f"{forks} forks recorded but {len(leaves)} leaves from {roots} root(s)"
    return _reference_problem(record, tree)


def _reference_problem(record: GroupRecord, tree: dict[str, Any] | None) -> str | None:
    """A leaf stored by reference must name the parent and branch turn the tree names."""
    if not record.stored_prefixes:
        return None
    if not tree:
        return f"{len(record.stored_prefixes)} leaves are stored by reference but no tree says how"
    leaves = tree["leaves"]
    for index, ref in sorted(record.stored_prefixes.items()):
        leaf = leaves[index]
        if (leaf.get("parent"), leaf.get("branch_turn")) != (ref.parent, ref.branch_turn):
            return (
                f"leaf {index}: stored as sharing the prefix of leaf {ref.parent} up to turn "
                f"{ref.branch_turn}, but the tree names parent {leaf.get('parent')} at turn "
                f"{leaf.get('branch_turn')}"
            )
    return None


def _prefix_problem(record: GroupRecord, tree: dict[str, Any]) -> str | None:
    assert record.group is not None
    trajectories = record.group.trajectories
    for i, leaf in enumerate(tree["leaves"]):
        parent = leaf.get("parent")
        if parent is None:
            continue
        mine = trajectories[i].transitions
        theirs = trajectories[parent].transitions
        cut = int(leaf["branch_turn"]) - 1
        if len(theirs) <= cut:
            return f"leaf {i}: parent {parent} ended before the branch turn"
        for turn in range(cut):
            a, b = mine[turn], theirs[turn]
            if a.ob != b.ob or a.ac.tokens != b.ac.tokens or a.ac.logprobs != b.ac.logprobs:
                return f"leaf {i}, turn {turn + 1}: differs from parent {parent} before the branch"
        if mine[cut].ob != theirs[cut].ob:
            return f"leaf {i}: the branch turn's observation differs from parent {parent}'s"
    return None


class TreesCheck:
    """Findings for the tree groups of a store (none when there are none)."""

    def __init__(self) -> None:
        self.orphan = FirstFailure()
        self.structure = FirstFailure()
        self.prefix = FirstFailure()
        self.trees = self.leaves = self.by_reference = 0

    def add(self, view: GroupView) -> None:
        self.add_record(view.record)

    def add_record(self, record: GroupRecord) -> None:
        if record.group is None:
            return
        tree = record.extra.get("tree")
        if not tree:
            if record.stored_prefixes:
                problem = _reference_problem(record, None)
                self.orphan.keep(self._fail("structure", problem, record))
            return
        self.trees += 1
        self.leaves += len(tree.get("leaves") or [])
        self.by_reference += len(record.stored_prefixes)
        problem = _structure_problem(record, tree)
        if problem is not None:
            self.structure.keep(self._fail("structure", problem, record))
        elif (problem := _prefix_problem(record, tree)) is not None:
            self.prefix.keep(self._fail("shared prefix", problem, record))

    @staticmethod
    def _fail(name: str, problem: str | None, record: GroupRecord) -> Finding:
        return Finding(Check.FIXED_TRAJECTORY, "fail", f"tree {name}: {problem}", record.key)

    def findings(self) -> list[Finding]:
        for first in (self.orphan, self.structure):
            if first.finding is not None:  # the prefix check reads the structure
                return [first.finding]
        if not self.trees:
            return []
        counts = f"({self.trees} trees, {self.leaves} leaves"
        found = [Finding(Check.FIXED_TRAJECTORY, "pass", f"tree structure holds {counts})")]
        if self.prefix.finding is not None:
            return [*found, self.prefix.finding]
        restored = (
            f"; {self.by_reference} stored by reference, restored from their parent)"
            if self.by_reference
            else ")"
        )
        detail = f"tree shared prefix holds {counts}{restored}"
        return [*found, Finding(Check.FIXED_TRAJECTORY, "pass", detail)]


def check_trees(records: Iterable[GroupRecord]) -> list[Finding]:
    """:class:`TreesCheck` over a list of records."""
    check = TreesCheck()
    for record in records:
        check.add_record(record)
    return check.findings()
