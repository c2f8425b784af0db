"""What crosses a process boundary: token ids as numpy arrays, not Python lists.

Ray pickles what it ships. A Python list of ints pickles element by element
(measured on this machine: 21.7 ms per round trip for 250k ids), a numpy array
as one buffer (4.0 ms for 1 MB). So a finished group travels from an actor to
the driver in the store's delta-encoded layout (:func:`trajectory_to_json`:
each observation as the tokens it adds to the previous context) with every
token and logprob sequence as an array, and comes back as exactly the lists
the in-process executor would have produced. A tree rollout's group keeps its
kind: its ``tree`` (plain JSON) travels with it and it comes back a
:class:`TreeGroup`, so the collector stores the same tree records either way.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from agentenvs.envs.types import TokensWithLogprobs, TrajectoryGroup
from agentenvs.envs.wire import trajectory_from_json, trajectory_to_json
from agentenvs.rollout.collect.tree import TreeGroup
from agentenvs.rollout.policies.base import StampedTokens

_INT32_MAX = np.iinfo(np.int32).max

_TOKEN_FIELDS = ("ob_new", "ac")


def token_array(tokens: list[int]) -> np.ndarray:
    """Token ids as a compact array: int32 when every id fits (all real vocabularies)."""
    array = np.asarray(tokens, dtype=np.int64)
    if array.size and (array.max() > _INT32_MAX or array.min() < 0):
        return array
    return array.astype(np.int32)


def token_list(array: np.ndarray | list[int]) -> list[int]:
    """Back to the plain Python ints the rest of the library works with."""
    return array.tolist() if isinstance(array, np.ndarray) else list(array)


def _float_array(values: list[float] | None) -> np.ndarray | None:
    # float64 keeps every Python float exactly; the records must not change.
    return None if values is None else np.asarray(values, dtype=np.float64)


def pack_group(group: TrajectoryGroup) -> dict[str, Any]:
    """A finished group in a form that pickles as a few buffers per trajectory."""
    trajectories = []
    for traj in group.trajectories:
        data = trajectory_to_json(traj, image_bytes=True)  # pixels travel with the group
        for item in data["transitions"]:
            for name in _TOKEN_FIELDS:
                item[name] = token_array(item[name])
            item["logprobs"] = _float_array(item["logprobs"])
        data["final_ob"] = token_array(data["final_ob"])
        trajectories.append(data)
    packed: dict[str, Any] = {
        "trajectories": trajectories,
        "group_rewards": list(group.group_rewards),
        "group_metrics": list(group.group_metrics),
        "tags": list(group.tags),
    }
    if isinstance(group, TreeGroup):
        packed["tree"] = group.tree
    return packed


def unpack_group(packed: dict[str, Any]) -> TrajectoryGroup:
    """The inverse of :func:`pack_group`: the group as the in-process executor returns it."""
    trajectories = []
    for data in packed["trajectories"]:
        for item in data["transitions"]:
            for name in _TOKEN_FIELDS:
                item[name] = token_list(item[name])
            if item["logprobs"] is not None:
                item["logprobs"] = item["logprobs"].tolist()
        data["final_ob"] = token_list(data["final_ob"])
        trajectories.append(trajectory_from_json(data))
    fields = {
        "trajectories": trajectories,
        "group_rewards": list(packed["group_rewards"]),
        "group_metrics": list(packed["group_metrics"]),
        "tags": list(packed["tags"]),
    }
    if "tree" in packed:
        return TreeGroup(**fields, tree=packed["tree"])
    return TrajectoryGroup(**fields)


def pack_action(action: TokensWithLogprobs) -> dict[str, Any]:
    """A policy's answer, for the trip from the driver's policy back to an actor."""
    return {
        "tokens": token_array(list(action.tokens)),
        "logprobs": _float_array(None if action.logprobs is None else list(action.logprobs)),
        "stop_reason": action.stop_reason,
        "stamp": dict(action.stamp if isinstance(action, StampedTokens) else {}),
    }


def unpack_action(packed: dict[str, Any]) -> TokensWithLogprobs:
    logprobs = packed["logprobs"]
    tokens = token_list(packed["tokens"])
    logprobs = None if logprobs is None else logprobs.tolist()
    if packed["stamp"]:
        return StampedTokens(tokens, logprobs, packed["stop_reason"], stamp=packed["stamp"])
    return TokensWithLogprobs(tokens, logprobs, packed["stop_reason"])


def ship(outcome: dict[str, Any]) -> bytes:
    """A group's outcome as one pickled blob for the trip from an actor to the driver.

    Ray pickles a result with each numpy array as a buffer of its own; a group has
    a few per turn, and the driver's cost per result grew with them (measured: 0.8
    ms of driver CPU per group as a dict of arrays, 0.45-0.5 ms as one blob,
    ``benchmarks/bench_driver.py``). The driver is what saturates first at scale."""
    return pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)


def landed(shipped: bytes | dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`ship` (a dict is passed through)."""
    return pickle.loads(shipped) if isinstance(shipped, bytes) else shipped
