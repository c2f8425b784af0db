"""The tree of a tree-rollout group, as the HTML view draws it.

A tree group's record (``collect/tree.py``) says, per leaf, its root, its path of
child indices and the turn of each branch point on it. A person reading the run
wants the other direction: each root, its branch points (at which turn, what
triggered them), the children there with the mean reward of the leaves under each
(the node value the tree advantages use, ``data/tree_advantages.py``) and what that
branch gained over its siblings' average, down to the leaves, each naming the leaf
it was forked from. This module builds that node list once, in Python, so the page
only draws it.

A tree description the page cannot use (hand-edited, truncated) gives a note naming
the problem instead of a tree: the viewer shows every file, it never refuses one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.data.tree_advantages import NodeKey, node_values


@dataclass
class TreeNode:
    """A prefix of paths in one root: a branch point, or a leaf's own end."""

    id: int
    root: int
    path: list[int]
    value: float | None
    """Mean reward of the leaves under this node."""
    gain: float | None = None
    """Value minus the parent node's value: what taking this branch gained (None at a root)."""
    turn: int | None = None
    """The turn at which this node branches (None for a leaf's node)."""
    trigger: str | None = None
    children: list[int] = field(default_factory=list)
    leaf: int | None = None
    """The trajectory ending here (a leaf's node)."""
    leaves: int = 0


def _finite(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None


def _build(record: GroupRecord, tree: dict[str, Any]) -> dict[str, Any]:
    assert record.group is not None
    rewards = record.group.total_rewards()
    values = node_values(rewards, tree)  # also checks one description per trajectory
    nodes: dict[NodeKey, TreeNode] = {}

    def node(key: NodeKey) -> TreeNode:
        if key not in nodes:
            nodes[key] = TreeNode(len(nodes), key[0], list(key[1]), _finite(values[key]))
        return nodes[key]

    described = []
    for index, leaf in enumerate(tree["leaves"]):
        root, path = int(leaf["root"]), tuple(int(c) for c in leaf["path"])
        turns, triggers = list(leaf["branch_turns"]), list(leaf.get("triggers") or [])
        if len(turns) != len(path):
            raise ValueError(f"leaf {index}: {len(turns)} branch turns for a path of {len(path)}")
        for depth in range(len(path) + 1):
            here = node((root, path[:depth]))
            here.leaves += 1
            if depth == len(path):
                here.leaf = index
                continue
            here.turn = int(turns[depth])
            here.trigger = str(triggers[depth]) if depth < len(triggers) else None
            child = node((root, path[: depth + 1]))
            if child.id not in here.children:
                here.children.append(child.id)
        parent, branch_turn = leaf.get("parent"), leaf.get("branch_turn")
        described.append(
            {
                "node": nodes[(root, path)].id,
                "parent": parent,
                "branch_turn": branch_turn,
                "branch_turns": [int(t) for t in turns],
            }
        )
    ordered = list(nodes.values())  # ids were handed out in this order
    for (root, path), here in nodes.items():
        here.children.sort(key=lambda i: ordered[i].path[-1])
        if path:
            above = nodes[(root, path[:-1])].value
            if here.value is not None and above is not None:
                here.gain = round(here.value - above, 6)
    roots = sorted({key[0] for key in nodes})
    return {
        "roots": [nodes[(root, ())].id for root in roots],
        "nodes": [asdict(n) for n in ordered],
        "leaves": described,
        "branch_points": sum(1 for n in ordered if n.children),
    }


def tree_data(record: GroupRecord) -> dict[str, Any] | None:
    """The tree of one group for the page; None when it has none; ``{"note": ...}`` when
    its description cannot be drawn."""
    tree = record.extra.get("tree")
    if not tree or record.group is None:
        return None
    try:
        return _build(record, tree)
    except (KeyError, TypeError, ValueError, IndexError) as err:
        detail = f"missing field {err}" if isinstance(err, KeyError) else str(err)
        return {"note": f"the tree description cannot be drawn ({detail})"}
