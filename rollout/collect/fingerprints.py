"""What a group held when it was collected, in a few bytes per turn, for offline checks.

Some corruptions of stored data leave every invariant intact: logprobs shifted by
one position inside an action, one extra token appended to an observation under the
continuation renderer (which has no end-of-turn marker to move), rewards swapped
between two trajectories together with their advantages. The data alone cannot
show these; a record of what the collector saw can. Per trajectory it keeps the
number of training samples it cuts into and how its episode ended, and per turn the
observation's shape (how many tokens it kept from the previous context, how many it
added, a digest of the added ones), a digest of the sampled ids and logprobs, the
step reward, the sampler's stop reason and whether the step ended the episode.
Digests are of the raw values (64-bit ids, IEEE doubles), so they are exact and
cost one pass over each token; ``agentenvs check`` recomputes them and names the
first turn that differs.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from typing import Any

from agentenvs.envs.types import Trajectory, TrajectoryGroup
from agentenvs.rollout.data.samples import PARSE_ERROR_MASKED_METRIC

FINGERPRINT_VERSION = 2
"""2 adds each turn's sampler stop and done flag, a float32 digest of its action, and
each trajectory's end (``end``)."""
READABLE_FINGERPRINTS = (1, FINGERPRINT_VERSION)
"""Versions ``agentenvs check`` compares (a version-1 record has no stop, done or end)."""

KEPT, ADDED, OB_DIGEST, ACTION_LENGTH, ACTION_DIGEST, REWARD, TRAINED, STOP, DONE = range(9)
ACTION_DIGEST32 = 9
"""Fields of one turn's fingerprint, in order (``STOP``, ``DONE`` and ``ACTION_DIGEST32``
from version 2)."""


def digest_ids(tokens: Sequence[int]) -> str:
    return hashlib.sha256(array("q", tokens).tobytes()).hexdigest()[:16]


def digest_action(tokens: Sequence[int], logprobs: Sequence[float] | None) -> str:
    """Sampled ids and their logprobs together: a shift of either changes it."""
    h = hashlib.sha256(array("q", tokens).tobytes())
    h.update(b"|" if logprobs is None else array("d", [float(x) for x in logprobs]).tobytes())
    return h.hexdigest()[:16]


def digest_action32(tokens: Sequence[int], logprobs: Sequence[float] | None) -> str:
    """:func:`digest_action` with the logprobs rounded to float32: what a hand-off that
    holds them at float32 (a verl batch, Tinker datums) is compared with."""
    h = hashlib.sha256(array("q", tokens).tobytes())
    h.update(b"|" if logprobs is None else array("f", [float(x) for x in logprobs]).tobytes())
    return h.hexdigest()[:16]


def observation_split(context: Sequence[int], ob: Sequence[int]) -> int:
    """How many leading tokens of ``ob`` are the previous context (0 after a break):
    the rule the store's delta encoding and the sample cutter both use."""
    n = len(context)
    return n if n and len(ob) >= n and list(ob[:n]) == list(context) else 0


def turn_fingerprints(traj: Trajectory) -> tuple[int, list[list[Any]]]:
    """``(samples, turns)``: each turn as ``[kept, added, digest of added, action
    length, digest of action, reward, trained, sampler stop, done, float32 digest of
    action]`` (``trained``: 0 for an action the loss leaves out,
    ``parse_error_masked``; ``done``: 1 on the step that ended the episode)."""
    turns: list[list[Any]] = []
    context: list[int] = []
    samples = 0
    for tr in traj.transitions:
        kept = observation_split(context, tr.ob)
        if kept == 0:
            samples += 1
        new = tr.ob[kept:]
        turns.append(
            [
                kept,
                len(new),
                digest_ids(new),
                len(tr.ac.tokens),
                digest_action(tr.ac.tokens, tr.ac.logprobs),
                float(tr.reward),
                int(float(tr.metrics.get(PARSE_ERROR_MASKED_METRIC, 0.0)) < 1.0),
                str(tr.ac.stop_reason),
                int(bool(tr.episode_done)),
                digest_action32(tr.ac.tokens, tr.ac.logprobs),
            ]
        )
        context = list(tr.ob) + list(tr.ac.tokens)
    return samples, turns


def group_fingerprint(group: TrajectoryGroup) -> dict[str, Any]:
    """The record's ``collected`` field (see the module docstring)."""
    trajectories = []
    for traj in group.trajectories:
        samples, turns = turn_fingerprints(traj)
        trajectories.append({"samples": samples, "turns": turns, "end": traj.stop_reason})
    return {
        "version": FINGERPRINT_VERSION,
        "trajectories": trajectories,
        "group_rewards": [float(r) for r in group.group_rewards],
    }


def sample_fingerprints(trajectory: dict[str, Any], total_reward: float) -> list[dict[str, Any]]:
    """One collected trajectory's fingerprint (an entry of ``group_fingerprint``'s
    ``trajectories``) split per training sample, each with the trajectory's total
    reward and how its episode ended: what a hand-off line carries so it can be
    checked without its store."""
    parts: list[dict[str, Any]] = []
    end = {"end": trajectory["end"]} if "end" in trajectory else {}
    for turn in trajectory.get("turns") or []:
        if turn[KEPT] == 0 or not parts:
            parts.append({"reward": float(total_reward), "turns": [], **end})
        parts[-1]["turns"].append(list(turn))
    return parts


def attach_collected(samples: Sequence[Any], record: Any, traj_index: int, reward: float) -> None:
    """Give each of a trajectory's samples its part of ``record.collected`` (nothing for
    a record without one): the JSONL hand-off then carries it."""
    trajectories = (record.collected or {}).get("trajectories") or []
    if traj_index < len(trajectories):
        parts = sample_fingerprints(trajectories[traj_index], reward)
        for sample, part in zip(samples, parts, strict=False):
            sample.collected = part
