"""``agentenvs check`` for gateway captures: segments linked, prefixes exact, every token delivered.

A trajectory captured through the gateway (a harness episode, or a standalone gateway
session: ``envs/harness/segments.py``) is a list of turns, each logging its segment,
its parent turn, the tokens its prompt shares with the parent's context, how it began
(``first``, ``extend``, ``rewrite``, ``branch``), the tokens sampled before it and a
digest of its own sampled tokens as the gateway handed them out. Training on it is
sound only if

* **links** hold: a parent is an earlier turn; an ``extend`` turn continues the latest
  turn of its parent's segment, every other turn opens a segment not seen before;
* **prefixes** hold: the prompt shares exactly the recorded tokens with the parent's
  context (prompt + sampled tokens), all of it for ``extend``: the context a token was
  sampled from is the one stored;
* **tokens** are the sampled ones: each turn's action matches the gateway's digest (a
  re-tokenized turn, an observation token moved into the action, fail here);
* **delivery** is complete: the running count of sampled tokens agrees turn by turn, the
  last turn's total equals what the stored turns hold, and the training samples
  (``rollout/data/samples.py``) put loss on exactly that many tokens: the delivered
  fraction must be 100%. A dropped segment or turn fails.

Records without gateway logs produce no finding. Reported under ``fixed_trajectory``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from agentenvs.envs.harness.segments import (
    PARENT_LOG,
    SAMPLED_BEFORE_LOG,
    SAMPLED_SHA_LOG,
    SAMPLED_TOKENS_METRIC,
    SEGMENT_LOG,
    SHARED_LOG,
    START_LOG,
    common_prefix,
    tokens_digest,
)
from agentenvs.envs.types import Trajectory
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.data.samples import trajectory_to_samples
from agentenvs.rollout.inspect.findings import Check, Finding

_KEYS = (SEGMENT_LOG, PARENT_LOG, SHARED_LOG, START_LOG, SAMPLED_BEFORE_LOG, SAMPLED_SHA_LOG)


@dataclass
class Delivery:
    """What one captured trajectory holds and hands to training."""

    turns: int
    segments: int
    sampled: int
    """Tokens the gateway sampled in the episode (its recorded total)."""
    trained: int
    """Tokens the training samples put loss on."""


def captured(records: Sequence[GroupRecord]) -> Iterator[tuple[str, int, Trajectory]]:
    """(group key, trajectory index, trajectory) of every trajectory with gateway logs."""
    for record in records:
        for index, traj in enumerate(record.group.trajectories if record.group else []):
            if any(SEGMENT_LOG in tr.logs for tr in traj.transitions):
                yield record.key, index, traj


def _int(logs: dict, key: str) -> int | None:
    value = logs.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _turn_problem(traj: Trajectory, i: int, tips: dict[int, int], sampled: int) -> str | None:
    transitions = traj.transitions
    logs = transitions[i].logs
    if any(key not in logs for key in _KEYS):
        missing = [key for key in _KEYS if key not in logs]
        return f"turn {i}: no {', '.join(missing)} log (not captured whole)"
    segment, parent, shared = (
        _int(logs, SEGMENT_LOG),
        _int(logs, PARENT_LOG),
        _int(logs, SHARED_LOG),
    )
    before, start = _int(logs, SAMPLED_BEFORE_LOG), logs[START_LOG]
    if None in (segment, parent, shared, before):
        return f"turn {i}: a segment log is not an integer"
    assert segment is not None and parent is not None and shared is not None
    if before != sampled:
        return (
            f"turn {i}: {before} tokens were sampled before it, but the stored turns before it "
            f"hold {sampled}: a turn was dropped or changed"
        )
    action = transitions[i].ac.tokens
    if logs[SAMPLED_SHA_LOG] != tokens_digest(action):
        return (
            f"turn {i}: its action is not the tokens the gateway sampled (re-tokenized or edited)"
        )
    context: list[int] = []
    if parent == -1:
        if shared != 0:
            return f"turn {i}: shares {shared} tokens with no parent"
    else:
        if not 0 <= parent < i:
            return f"turn {i}: parent {parent} is not an earlier turn"
        context = transitions[parent].ob + transitions[parent].ac.tokens
        common = common_prefix(transitions[i].ob, context)
        if common < shared:
            return (
                f"turn {i}: its prompt leaves parent {parent}'s context at token {common}, "
                f"but {shared} shared tokens are recorded"
            )
    if start == "extend":
        if parent == -1 or shared != len(context):
            return f"turn {i}: extends turn {parent} but does not hold its whole context"
        if tips.get(segment) != parent:
            return (
                f"turn {i}: extends turn {parent}, which is not the last turn of segment {segment}"
            )
    elif segment in tips:
        return f"turn {i}: a {start!r} turn reuses segment {segment}"
    tips[segment] = i
    return None


def delivery(traj: Trajectory) -> tuple[Delivery | None, str | None]:
    """What a captured trajectory delivers, or the first problem with it."""
    tips: dict[int, int] = {}
    sampled = 0
    for i, transition in enumerate(traj.transitions):
        if problem := _turn_problem(traj, i, tips, sampled):
            return None, problem
        sampled += len(transition.ac.tokens)
    total = traj.transitions[-1].metrics.get(SAMPLED_TOKENS_METRIC) if traj.transitions else None
    if total is None:
        return None, "the last turn carries no total of sampled tokens (its tail was dropped?)"
    try:
        samples = trajectory_to_samples(traj, 0.0)
    except ValueError as err:
        return None, str(err)
    trained = sum(sum(s.loss_mask) for s in samples)
    found = Delivery(len(traj.transitions), len(tips), int(total), trained)
    if int(total) != sampled or trained != int(total):
        share = trained / total if total else 0.0
        return found, (
            f"{trained} of {int(total)} sampled tokens reach training ({share:.1%}); the stored "
            f"turns hold {sampled}"
        )
    return found, None


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def check_segments(records: Sequence[GroupRecord]) -> list[Finding]:
    """Findings for the gateway captures among ``records`` ([] when there are none)."""
    episodes = segments = turns = sampled = trained = 0
    for key, index, traj in captured(records):
        found, problem = delivery(traj)
        if problem is not None:
            where = f"group {key} traj {index}"
            return [Finding(Check.FIXED_TRAJECTORY, "fail", f"gateway capture: {problem}", where)]
        assert found is not None
        episodes += 1
        segments += found.segments
        turns += found.turns
        sampled += found.sampled
        trained += found.trained
    if not episodes:
        return []
    share = trained / sampled if sampled else 1.0
    return [
        Finding(
            Check.FIXED_TRAJECTORY,
            "pass",
            f"gateway captures: {_count(episodes, 'episode')}, {_count(segments, 'segment')}, "
            f"{_count(turns, 'turn')}; links, "
            f"prefixes and sampled tokens hold; delivered {share:.1%} ({trained} of {sampled} "
            "sampled tokens)",
        )
    ]
