"""How each turn stopped and how each episode ended, against the tokens and the rules.

A sampler says why it stopped (``stop``: a stop sequence; ``eos``: the end-of-sequence
token; ``length``: the token cap) and an episode ends on exactly one step, which
names why (``stop/<reason>``). Both can be written wrong upstream of the record and
stay consistent with everything else: a client that strips the stop token leaves a
turn that says ``eos`` without one (the template adds the end-of-turn marker back, so
the context looks right); an agent loop appends a turn after the episode ended; a
cut-off action keeps the reward the task would have given a finished one. The rules
checked here, per trajectory:

* a turn that says ``eos`` ends on an end-of-sequence (control) token, and a turn that
  ends on the tokenizer's EOS token says ``eos``;
* exactly the last turn is ``done``, it alone carries the one-hot ``stop/<reason>``,
  and the trajectory's ``stop_reason`` is that reason;
* under ``on_truncated_action: end`` a turn cut off by the cap (``length``) ends the
  episode, by a limit (``max_tokens``, or the response budget when one is set);
* a limit-ended episode's last reward is what the environment declares for that
  ending (:meth:`EnvConfig.limit_reward <agentenvs.envs.config.EnvConfig.limit_reward>`).

A hand-off sample that carries its collection record (which holds each turn's stop
and done, and the trajectory's end) is held to the rules the tokens alone can show.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, get_args

from agentenvs.envs.tokenizing import EnvTextEncoder
from agentenvs.envs.types import STOP_METRIC_PREFIX, SamplerStopReason
from agentenvs.rollout.collect.fingerprints import ACTION_LENGTH, ADDED, DONE, STOP
from agentenvs.rollout.data.samples import TrainingSample
from agentenvs.rollout.inspect.env_configs import rule_config
from agentenvs.rollout.inspect.findings import Check, Finding
from agentenvs.rollout.inspect.groups import FirstFailure, GroupView

SAMPLER_STOPS = frozenset(get_args(SamplerStopReason))
LIMIT_ENDS_AFTER_LENGTH = frozenset({"max_tokens", "out_of_vocabulary", "context_overflow"})
"""How an episode whose last action was cut off by the cap may end (without a budget)."""


class StopTokens:
    """What the tokenizer says about a turn's last sampled id."""

    def __init__(self, tokenizer: Any) -> None:
        self.controls = frozenset(EnvTextEncoder.for_tokenizer(tokenizer).control_ids)
        eos = tokenizer.eos_token_id
        self.eos = eos if isinstance(eos, int) and eos in self.controls else None

    def problem(self, stop: str, tokens: Sequence[int]) -> str | None:
        last = tokens[-1] if tokens else None
        if stop == "eos" and last not in self.controls:
            shown = "no token" if last is None else f"id {last}, not an end-of-sequence token"
            return (
                f"the sampler says it stopped on EOS, but the turn ends on {shown}: a stop "
                "token the client stripped (and the template added back)"
            )
        if last is not None and last == self.eos and stop != "eos":
            return f"the turn ends on the EOS token ({last}) but the sampler says {stop!r}"
        return None


def _stop_metrics(metrics: dict[str, Any]) -> list[str]:
    return [k[len(STOP_METRIC_PREFIX) :] for k, v in metrics.items() if k.startswith(STOP_METRIC_PREFIX) and v]  # fmt: skip


def _structure_problem(traj: Any) -> tuple[int, str] | None:
    """(turn, why) where a trajectory's done flags and stop reasons break the rules."""
    last = len(traj.transitions) - 1
    for turn, tr in enumerate(traj.transitions):
        if tr.ac.stop_reason not in SAMPLER_STOPS:
            return turn, f"sampler stop {tr.ac.stop_reason!r} is none of {sorted(SAMPLER_STOPS)}"
        reasons = _stop_metrics(tr.metrics)
        if tr.episode_done and turn < last:
            return turn + 1, (
                f"turn {turn + 1} follows the step that ended the episode (done at turn {turn}): "
                "a turn appended after the end"
            )
        if turn < last and reasons:
            return turn, f"stop/{reasons[0]} on a turn that did not end the episode"
    tr = traj.transitions[last]
    reasons = _stop_metrics(tr.metrics)
    if not tr.episode_done:
        return last, "the last turn is not done: the episode ended without the env ending it"
    if len(reasons) != 1:
        return last, f"the ending step names {len(reasons)} stop reasons ({reasons}), not one"
    if traj.stop_reason is not None and traj.stop_reason != reasons[0]:
        return last, (
            f"the trajectory says it ended by {traj.stop_reason!r}, its last step by {reasons[0]!r}"
        )
    return None


def _limit_problem(record: Any, traj: Any) -> tuple[int, str] | None:
    """The env's rules for cut-off actions and limit-ended episodes."""
    config = rule_config(record)
    if config is None:
        return None
    limits = config.limits
    last = len(traj.transitions) - 1
    for turn, tr in enumerate(traj.transitions):
        if tr.ac.stop_reason == "length" and limits.on_truncated_action == "end" and turn < last:
            return turn, (
                "a turn cut off by the token cap (length) did not end the episode, though the "
                "env ends cut-off actions (limits.on_truncated_action end)"
            )
    final = traj.transitions[last]
    end = (_stop_metrics(final.metrics) or [""])[0]
    budget = limits.max_response_tokens is not None
    if (
        final.ac.stop_reason == "length"
        and limits.on_truncated_action == "end"
        and not budget
        and end not in LIMIT_ENDS_AFTER_LENGTH
    ):
        return last, (
            f"the last action was cut off by the token cap (length) but the episode ended by "
            f"{end!r}: the env ends a cut-off action by the limit (max_tokens), unjudged"
        )
    rule = config.limit_reward(end) if end else None
    if rule is not None and not math.isclose(float(final.reward), rule, abs_tol=1e-9):
        return last, (
            f"the episode ended by the limit {end!r}, whose reward is {rule:g} by the env's "
            f"rule (EnvConfig.limit_reward), but its last step has reward {final.reward:g}: "
            "a cut-off episode that kept a reward"
        )
    return None


class EpisodeEndsCheck:
    """Every trajectory's stops and end, by the rules in the module docstring."""

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokens = StopTokens(tokenizer) if tokenizer is not None else None
        self.turns = self.trajectories = 0
        self.stops: dict[str, int] = {}
        self.first = FirstFailure()

    def add(self, view: GroupView) -> None:
        for t, traj in view.trajectories():
            self.trajectories += 1
            self.turns += len(traj.transitions)
            for tr in traj.transitions:
                self.stops[tr.ac.stop_reason] = self.stops.get(tr.ac.stop_reason, 0) + 1
            if self.first.found or not traj.transitions:
                continue
            problem = _structure_problem(traj) or _limit_problem(view.record, traj)
            if problem is None and self.tokens is not None:
                problem = next(
                    (
                        (turn, found)
                        for turn, tr in enumerate(traj.transitions)
                        if (found := self.tokens.problem(tr.ac.stop_reason, tr.ac.tokens))
                    ),
                    None,
                )
            if problem is not None:
                turn, why = problem
                self.first.keep(Finding(Check.FIXED_TRAJECTORY, "fail", why, view.where(t, turn)))

    def findings(self) -> list[Finding]:
        if self.first.finding is not None:
            return [self.first.finding]
        stops = ", ".join(f"{k} {n}" for k, n in sorted(self.stops.items()))
        tokens = "" if self.tokens is not None else " (no tokenizer: last tokens not read)"
        detail = (
            f"{self.trajectories} episodes end once, on their last turn, by the env's rules; "
            f"{self.turns} turns' stop reasons ({stops}) agree with their last token{tokens}"
        )
        return [Finding(Check.FIXED_TRAJECTORY, "pass", detail)]


def _sample_stop_problem(
    s: TrainingSample, tokens: StopTokens | None
) -> tuple[int | None, str] | None:
    """Where a hand-off sample's recorded stops and ends break the rules."""
    assert s.collected is not None
    turns = s.collected.get("turns") or []
    pos = 0
    for turn, want in enumerate(turns):
        if len(want) <= DONE:
            return None  # a record from before stops and ends were kept
        pos += want[ADDED]
        end = pos + want[ACTION_LENGTH]
        if want[DONE] and turn < len(turns) - 1:
            return pos, (
                f"turn {turn + 1} of this sample follows the step that ended the episode: a turn "
                "appended after the end"
            )
        if tokens is not None:
            found = tokens.problem(str(want[STOP]), s.tokens[pos:end])
            if found:
                return max(end - 1, pos), f"turn {turn}: {found}"
        pos = end
    return None


def check_sample_stops(samples: Sequence[TrainingSample], tokenizer: Any = None) -> Finding:
    """Hand-off samples with their collection record: turns stop as their last token
    says, no turn follows the end (in its sample or in a later sample of the
    trajectory), and each trajectory's last sample ends it."""
    tokens = StopTokens(tokenizer) if tokenizer is not None else None
    last: dict[tuple[int, int], TrainingSample] = {}
    ended: dict[tuple[int, int], int] = {}
    checked = 0
    for s in samples:
        if not s.collected:
            continue
        checked += 1
        problem = _sample_stop_problem(s, tokens)
        if problem is not None:
            pos, why = problem
            return Finding(Check.FIXED_TRAJECTORY, "fail", why, _where(s, pos))
        slot = (s.group_index, s.traj_index)
        if slot not in last or last[slot].sample_index < s.sample_index:
            last[slot] = s
        turns = s.collected.get("turns") or []
        if turns and len(turns[-1]) > DONE and turns[-1][DONE]:
            ended[slot] = min(ended.get(slot, s.sample_index), s.sample_index)
    for slot, s in last.items():
        if slot in ended and ended[slot] < s.sample_index:
            why = (
                f"sample {s.sample_index} follows sample {ended[slot]}, which ended the "
                "episode: turns appended after the end"
            )
            return Finding(Check.FIXED_TRAJECTORY, "fail", why, _where(s, None))
        collected = s.collected or {}
        turns = collected.get("turns") or []
        if turns and len(turns[-1]) > DONE and not turns[-1][DONE] and collected.get("end"):
            why = (
                f"the trajectory ended ({collected['end']}) but its last sample's last turn is "
                "not the ending step: turns after it are missing"
            )
            return Finding(Check.FIXED_TRAJECTORY, "fail", why, _where(s, None))
    if not checked:
        detail = "stops and ends: no sample carries its record"
        return Finding(Check.FIXED_TRAJECTORY, "skip", detail)
    return Finding(
        Check.FIXED_TRAJECTORY,
        "pass",
        f"{checked} samples: every turn stops as its last token says, no turn follows an end",
    )


def _where(s: TrainingSample, pos: int | None) -> str:
    head = f"group {s.group_index} traj {s.traj_index} sample {s.sample_index}"
    return head if pos is None else f"{head} token {pos}"
