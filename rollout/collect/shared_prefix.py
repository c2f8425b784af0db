"""Tree leaves stored once: a leaf refers to its parent for the prefix they share.

The leaves of a tree rollout (``collect/tree.py``) are identical up to their branch
turn: the same transitions, then the same observation. Storing each leaf whole
writes that shared prefix once per leaf, K times at every branch point. Here a leaf
whose parent is in the same record is stored as a reference plus its own part::

    {"prefix_from": {"parent": p, "branch_turn": b},
     "transitions": [transition b without its observation, b + 1, ...],
     "final_ob": ..., "stop_reason": ...}

Reading copies the parent's first ``b - 1`` transitions and its turn-``b``
observation back in front, so the leaf comes back token for token.

A leaf is stored by reference only when its JSON prefix is *textually* identical to
its parent's (every field of every earlier transition, then the branch turn's
observation): a leaf that does not really share it (a broken fork) is stored whole,
so ``agentenvs check`` still sees the difference. References point only to earlier
leaves (a tree's leaves are stored in (root, path) order, parents first), which keeps
reading one pass and makes a cycle impossible.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.types import Trajectory

OBSERVATION_FIELDS = ("ob_prefix", "ob_new")
"""How a stored transition holds its observation (delta-encoded, ``records.py``)."""


@dataclass(frozen=True)
class PrefixRef:
    """A stored leaf's reference: its first ``branch_turn - 1`` transitions and its
    turn-``branch_turn`` observation are those of leaf ``parent``."""

    parent: int
    branch_turn: int

    def to_json(self) -> dict[str, int]:
        return {"parent": self.parent, "branch_turn": self.branch_turn}


def references_from_tree(tree: Any, leaves: int) -> dict[int, PrefixRef]:
    """The references a tree description allows: leaf -> (earlier parent, branch turn).

    Anything malformed in the description is simply not used (that leaf is stored
    whole): writing must never fail because of a tree, and the check judges it."""
    described = tree.get("leaves") if isinstance(tree, dict) else None
    if not isinstance(described, list) or len(described) != leaves:
        return {}
    refs = {}
    for index, leaf in enumerate(described):
        if not isinstance(leaf, dict):
            continue
        parent, turn = leaf.get("parent"), leaf.get("branch_turn")
        if _is_int(parent) and _is_int(turn) and 0 <= parent < index and turn >= 1:
            refs[index] = PrefixRef(parent, turn)
    return refs


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _same_json(a: Any, b: Any) -> bool:
    """Identical as stored: ``1`` and ``1.0`` (or ``True``) compare equal in Python but
    are written differently, and the restored leaf must be the one that was written."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def shares_prefix(leaf: dict[str, Any], parent: dict[str, Any], branch_turn: int) -> bool:
    """Whether a stored leaf equals its stored parent up to ``branch_turn`` (JSON forms)."""
    mine, theirs = leaf["transitions"], parent["transitions"]
    cut = branch_turn - 1
    if cut >= len(mine) or cut >= len(theirs):
        return False
    if not _same_json(mine[:cut], theirs[:cut]):
        return False
    return all(_same_json(mine[cut][f], theirs[cut][f]) for f in OBSERVATION_FIELDS)


def encode_leaves(
    trajectories: Sequence[Trajectory], tree: Any, encode: Any
) -> tuple[list[dict[str, Any]], int]:
    """Each trajectory's stored form, leaves by reference where ``tree`` allows it.

    ``encode`` is the whole-trajectory encoder (``records.trajectory_to_json``).
    Returns the items and how many were stored by reference."""
    whole = [encode(t) for t in trajectories]
    refs = references_from_tree(tree, len(whole))
    items, shared = [], 0
    for index, item in enumerate(whole):
        ref = refs.get(index)
        if ref is None or not shares_prefix(item, whole[ref.parent], ref.branch_turn):
            items.append(item)
            continue
        own = [dict(t) for t in item["transitions"][ref.branch_turn - 1 :]]
        for name in OBSERVATION_FIELDS:
            del own[0][name]
        items.append({**item, "prefix_from": ref.to_json(), "transitions": own})
        shared += 1
    return items, shared


class PrefixError(AgentEnvsError, ValueError):
    """A stored reference that cannot be restored; the message names the leaf."""


def _reference(index: int, raw: Any, restored: list[dict[str, Any]]) -> PrefixRef:
    where = f"trajectory {index}"
    if not isinstance(raw, dict):
        raise PrefixError(f"{where}: prefix_from must be an object, got {type(raw).__name__}")
    parent, turn = raw.get("parent"), raw.get("branch_turn")
    if not _is_int(parent) or not _is_int(turn):
        raise PrefixError(
            f"{where}: prefix_from needs integer parent and branch_turn, got {parent!r}, {turn!r}"
        )
    if not 0 <= parent < index:
        raise PrefixError(f"{where}: prefix_from names parent {parent}, not an earlier trajectory")
    if turn < 1:
        raise PrefixError(f"{where}: branch_turn {turn} (turns count from 1)")
    parent_turns = len(restored[parent]["transitions"])
    if turn > parent_turns:
        raise PrefixError(
            f"{where}: branch_turn {turn} is beyond its parent {parent}, which has "
            f"{parent_turns} turn(s)"
        )
    return PrefixRef(parent, turn)


def restore_leaves(items: Sequence[Any]) -> tuple[list[dict[str, Any]], dict[int, PrefixRef]]:
    """The whole JSON form of every stored trajectory, and the references that were read.

    Raises :class:`PrefixError` for a reference that cannot be restored (a parent that
    is not an earlier trajectory, a branch turn beyond the parent's length, a leaf
    without its branch turn)."""
    restored: list[dict[str, Any]] = []
    refs: dict[int, PrefixRef] = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict) or "prefix_from" not in item:
            restored.append(item)
            continue
        ref = _reference(index, item["prefix_from"], restored)
        own = item.get("transitions")
        if not isinstance(own, list) or not own or not isinstance(own[0], dict):
            raise PrefixError(f"trajectory {index}: stored by reference without its branch turn")
        theirs = restored[ref.parent]["transitions"]
        cut = ref.branch_turn - 1
        first = {**own[0], **{name: theirs[cut][name] for name in OBSERVATION_FIELDS}}
        whole = {k: v for k, v in item.items() if k != "prefix_from"}
        whole["transitions"] = [*theirs[:cut], first, *own[1:]]
        restored.append(whole)
        refs[index] = ref
    return restored, refs
