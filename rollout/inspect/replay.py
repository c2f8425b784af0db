"""``agentenvs check --replay``: re-run each episode from its record and compare.

Every other check compares a store with itself: a bug upstream of the record that
writes self-consistent wrong data (a renderer that changed a prompt word, an env whose
reward is ten times too large, a reward function of another version under the same
identity, two turns reordered, a turn appended after the end) passes them all. An
environment that declares its episodes deterministic
(:attr:`EnvConfig.deterministic <agentenvs.envs.config.EnvConfig.deterministic>`) can
be asked again: the config is rebuilt from the record, the task found by its id in
the recorded split, the episode made with the check's tokenizer (the run's own, by
its fingerprint) and stepped with the recorded actions and sampler stops. Every
observation token, reward, metric (reward components included), end, stop reason
and step log (tool outcomes included) must be what the record holds; the first
difference is named by group, trajectory, turn and token. Group rewards are
recomputed the same way.

That recomputation is the regrade: rewards come from the recorded reward inputs (the
actions, the task) under the installed reward code, which must be the code the record
names (:func:`installed_differences`); where it is not, rewards are not compared and
the regrade is refused unless ``--against VERSION`` names the installed version the
user accepts. An environment that cannot replay (not declared deterministic, or a
config with a remote part: :meth:`EnvConfig.replay_refusal`) is named in the report.
"""

from __future__ import annotations

import asyncio
import atexit
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.rendered_env import RenderedEnv
from agentenvs.envs.tokenizer_fingerprint import tokenizer_key, tokenizer_key_from
from agentenvs.envs.types import StepResult, Trajectory, Transition, observation_images
from agentenvs.envs.wire import IMAGES_SEEN_LOG, placements_digest
from agentenvs.rollout.inspect.codec import Codec
from agentenvs.rollout.inspect.env_configs import env_config
from agentenvs.rollout.inspect.findings import Check, Finding
from agentenvs.rollout.inspect.groups import FirstFailure, GroupView
from agentenvs.rollout.inspect.options import CheckOptions
from agentenvs.rollout.inspect.reward_checks import installed_differences

_RUNNER: list[asyncio.Runner] = []
"""One event loop for every replay in the process, so what episodes share across
groups and checks (a sandbox's warm workers, ALFWorld's engines) starts once; it is
closed at exit, which closes what its episodes opened."""


def _runner() -> asyncio.Runner:
    if not _RUNNER:
        _RUNNER.append(asyncio.Runner())
        atexit.register(_RUNNER[0].close)
    return _RUNNER[0]


POLICY_LOG_PREFIX = "policy/"
"""Step logs the collector adds from the policy's stamp: not the env's output."""


@dataclass(frozen=True)
class Difference:
    """Where a replayed episode first departs from its record."""

    turn: int
    detail: str
    token: int | None = None
    check: Check = Check.FIXED_TRAJECTORY


def _task_indices(config: EnvConfig, split: str) -> dict[str, int]:
    """Task id -> index in ``split``."""
    return {config.task_id(i, split): i for i in range(config.num_tasks(split))}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


def _mapping_difference(
    kind: str, recorded: Mapping[str, Any], replayed: Mapping[str, Any], skip: frozenset[str]
) -> str | None:
    for key in sorted(set(recorded) | set(replayed)):
        if key in skip or key == IMAGES_SEEN_LOG or key.startswith(POLICY_LOG_PREFIX):
            continue
        if key not in replayed:
            return f"{kind} {key!r} is in the record ({recorded[key]!r}) but not in the replay"
        if key not in recorded:
            return f"{kind} {key!r} replays as {replayed[key]!r} but is not in the record"
        if not _same(recorded[key], replayed[key]):
            shown = [str(v)[:80] for v in (recorded[key], replayed[key])]
            return f"{kind} {key!r} is {shown[0]!r} in the record but replays as {shown[1]!r}"
    return None


@dataclass
class _Episode:
    """What one trajectory's replay needs and found."""

    env: RenderedEnv
    traj: Trajectory
    difference: Difference | None = None


class _Replayer:
    """Replays the trajectories of one group under one rebuilt config."""

    def __init__(self, config: EnvConfig, codec: Codec, rewards: bool) -> None:
        self.config = config
        self.codec = codec
        self.rewards = rewards
        self.volatile = frozenset(config.replay_volatile)

    def _tokens(
        self, turn: int, recorded: Sequence[int], replayed: Sequence[int]
    ) -> Difference | None:
        if list(recorded) == list(replayed):
            return None
        pos = next(
            (i for i, (a, b) in enumerate(zip(recorded, replayed, strict=False)) if a != b),
            min(len(recorded), len(replayed)),
        )
        have = self._shown(recorded, pos)
        want = self._shown(replayed, pos)
        detail = (
            f"observation token {pos} is {have} in the record but the env gives {want} "
            f"({len(recorded)} tokens recorded, {len(replayed)} replayed): not what the "
            "environment shows for these actions"
        )
        return Difference(turn, detail, pos)

    def _images(self, turn: int, tr: Transition, observation: Sequence[int]) -> Difference | None:
        """The pictures the env shows at this turn are the ones the policy was shown: the
        collector's witness (``images_seen``) against the replayed observation's placements."""
        shown = observation_images(observation)
        replayed = placements_digest(shown) if shown else None
        recorded = tr.logs.get(IMAGES_SEEN_LOG)
        if recorded == replayed:
            return None
        detail = (
            f"the observation's images replay as {replayed or 'none'} but the policy was "
            f"shown {recorded or 'none'} (placement digests): not the env's pictures"
        )
        return Difference(turn, detail)

    def _shown(self, tokens: Sequence[int], pos: int) -> str:
        if pos >= len(tokens):
            return "past the end"
        return f"{tokens[pos]} ({self.codec.decode([tokens[pos]])!r})"

    def _step(self, turn: int, tr: Transition, step: StepResult) -> Difference | None:
        if step.episode_done != tr.episode_done:
            said = "ended the episode" if step.episode_done else "did not end the episode"
            return Difference(turn, f"the env {said} at this turn; the record says the opposite")
        if self.rewards and not _same(tr.reward, step.reward):
            detail = f"reward {tr.reward:g} in the record but the env gives {step.reward:g}"
            return Difference(turn, detail, check=Check.REWARDS)
        metrics = dict(step.metrics) if self.rewards else {}
        recorded = dict(tr.metrics) if self.rewards else {}
        if not self.rewards:  # the stop reason is no reward component: still compared
            metrics = {k: v for k, v in step.metrics.items() if k.startswith("stop/")}
            recorded = {k: v for k, v in tr.metrics.items() if k.startswith("stop/")}
        found = _mapping_difference("metric", recorded, metrics, self.volatile)
        if found:
            return Difference(turn, found, check=Check.REWARDS if self.rewards else Check.FIXED_TRAJECTORY)  # fmt: skip
        found = _mapping_difference("step log", tr.logs, step.logs, self.volatile)
        return Difference(turn, found) if found else None

    def _stopped(self, turn: int, tokens: Sequence[int], stops: Sequence[Any]) -> Difference | None:
        """A turn that says it stopped on a stop sequence (``stop``) must end with one the
        env asked for at that turn: completed by its last token, not before."""
        strings = [str(s) for s in stops if isinstance(s, str) and s]
        if not strings or not tokens:
            return None
        text, before = self.codec.decode(tokens), self.codec.decode(tokens[:-1])
        if any(s in text and s not in before for s in strings):
            return None
        detail = (
            f"the sampler says it stopped on a stop sequence, but no stop sequence of this "
            f"turn ({', '.join(repr(s) for s in strings[:4])}) ends the action"
        )
        return Difference(turn, detail, len(tokens) - 1)

    async def episode(self, task: int, split: str, tokenizer: Any, traj: Trajectory) -> _Episode:
        env = self.config.make_env(task, tokenizer, split)
        episode = _Episode(env, traj)
        turn = 0
        try:
            observation, stops = await env.initial_observation()
            for turn, tr in enumerate(traj.transitions):
                if env.done:
                    detail = f"turn {turn} follows the end the env gave at turn {turn - 1}"
                    episode.difference = Difference(turn, detail)
                    return episode
                episode.difference = self._tokens(turn, tr.ob, observation) or self._images(
                    turn, tr, observation
                )
                if episode.difference is None and tr.ac.stop_reason == "stop":
                    episode.difference = self._stopped(turn, tr.ac.tokens, stops)
                if episode.difference is not None:
                    return episode
                step = await env.step(list(tr.ac.tokens), extra={"stop_reason": tr.ac.stop_reason})
                episode.difference = self._step(turn, tr, step)
                if episode.difference is not None:
                    return episode
                observation, stops = step.next_observation, step.next_stop_condition
            if not env.done:
                detail = "the record ends here but the env did not end the episode"
                episode.difference = Difference(turn, detail)
        except Exception as error:  # an env that cannot take the record's actions
            detail = f"the env raised {type(error).__name__} on replay: {str(error)[:200]}"
            episode.difference = Difference(turn, detail)
        return episode

    async def group(
        self, view: GroupView, task: int, split: str, tokenizer: Any
    ) -> list[tuple[int, Difference]]:
        """Each trajectory's first difference, then the group rewards' (traj, difference)."""
        episodes = await asyncio.gather(
            *(self.episode(task, split, tokenizer, traj) for _, traj in view.trajectories())
        )
        try:
            found = [(t, e.difference) for t, e in enumerate(episodes) if e.difference]
            if found or view.record.extra.get("tree") or not self.rewards:
                return found
            assert view.record.group is not None
            group = view.record.group
            scored = await self.config.group_rewards(
                [e.traj for e in episodes], [e.env.task for e in episodes]
            )
            for t, ((reward, metrics), want, want_metrics) in enumerate(
                zip(scored, group.group_rewards, group.group_metrics, strict=False)
            ):
                if not _same(reward, want):
                    detail = f"group reward {want:g} in the record but the env gives {reward:g}"
                    return [(t, Difference(-1, detail, check=Check.REWARDS))]
                problem = _mapping_difference("group metric", want_metrics, metrics, self.volatile)
                if problem:
                    return [(t, Difference(-1, problem, check=Check.REWARDS))]
            return []
        finally:
            for episode in episodes:
                await episode.env.close()


class ReplayCheck:
    """``--replay`` over a store's groups (see the module docstring)."""

    def __init__(self, tokenizer: Any, options: CheckOptions) -> None:
        self.tokenizer = tokenizer
        self.codec = Codec.of(tokenizer) if tokenizer is not None else None
        self.against = options.against_version
        self.refused: dict[str, tuple[str, int]] = {}
        self.tasks: dict[tuple[str, str, str], dict[str, int]] = {}
        """(env, config hash, split) -> task id -> index, listed once per stored config."""
        self.replayed: Counter[str] = Counter()
        self.episodes = 0
        self.regraded = 0
        self.regrade_refused = FirstFailure()
        self.first = FirstFailure()

    def _refuse(self, env: str, why: str) -> None:
        _, count = self.refused.get(env, (why, 0))
        self.refused[env] = (why, count + 1)

    def _prepared(self, view: GroupView) -> tuple[EnvConfig, int, str] | None:
        record = view.record
        config, why = env_config(record)
        if config is None:
            self._refuse(record.env, why)
            return None
        refusal = config.replay_refusal()
        if refusal:
            self._refuse(record.env, refusal)
            return None
        if self.tokenizer is None:
            self._refuse(record.env, "no tokenizer to render the episodes with (pass --tokenizer)")
            return None
        wanted = tokenizer_key_from(record.provenance.get("tokenizer"))
        if wanted is not None and wanted != tokenizer_key(self.tokenizer):
            self._refuse(record.env, f"the run used another tokenizer ({wanted})")
            return None
        split = str(record.run.get("split") or "train")
        try:
            slot = (record.env, config.config_hash(), split)
            if slot not in self.tasks:
                self.tasks[slot] = _task_indices(config, split)
            index = self.tasks[slot].get(record.task_id)
        except Exception as error:  # a dataset that cannot be listed here
            self._refuse(record.env, f"its tasks cannot be listed here: {str(error)[:120]}")
            return None
        if index is None:
            self._refuse(record.env, f"task {record.task_id!r} is not in split {split!r} here")
            return None
        return config, index, split

    def add(self, view: GroupView) -> None:
        if self.first.found:
            return
        prepared = self._prepared(view)
        if prepared is None:
            return
        config, index, split = prepared
        refused = [c for c in installed_differences(view.record) if not c.accepted_by(self.against)]
        rewards = not refused
        if refused and not self.regrade_refused.found:
            change = refused[0]
            self.regrade_refused.keep(
                Finding(
                    Check.REWARDS,
                    "fail",
                    f"regrade refused: reward component {change.name!r} of {view.record.env} "
                    f"differs from the installed code ({'; '.join(change.changes)}); rewards are "
                    "not recomputed (pass --against VERSION to regrade under the installed "
                    "version)",
                    view.where(),
                )
            )
        assert self.codec is not None
        replayer = _Replayer(config, self.codec, rewards)
        found = _runner().run(replayer.group(view, index, split, self.tokenizer))
        self.replayed[view.record.env] += 1
        self.episodes += len(view.rewards)
        self.regraded += len(view.rewards) if rewards else 0
        if found:
            t, difference = found[0]
            where = view.where(t) if difference.turn < 0 else view.where(t, difference.turn)
            if difference.token is not None:
                where += f" token {difference.token}"
            self.first.keep(
                Finding(difference.check, "fail", f"replay: {difference.detail}", where)
            )

    def findings(self) -> list[Finding]:
        found = [f for f in (self.first.finding, self.regrade_refused.finding) if f is not None]
        for env, (why, count) in sorted(self.refused.items()):
            found.append(
                Finding(
                    Check.FIXED_TRAJECTORY,
                    "skip",
                    f"replay: {count} groups of {env} not replayed: {why}",
                )
            )
        if self.first.finding is None and self.replayed:
            envs = ", ".join(f"{env} {n}" for env, n in sorted(self.replayed.items()))
            detail = (
                f"replay: {self.episodes} episodes re-run from their record (groups: {envs}); "
                "every observation token, end, stop reason and step log is what the env gives"
            )
            found.append(Finding(Check.FIXED_TRAJECTORY, "pass", detail))
            if self.regraded:
                detail = (
                    f"regrade: {self.regraded} episodes' rewards, reward components and group "
                    "rewards recomputed by the reward code the records name: equal"
                )
                found.append(Finding(Check.REWARDS, "pass", detail))
        if not found:
            found.append(Finding(Check.FIXED_TRAJECTORY, "skip", "replay: no group to replay"))
        return found
