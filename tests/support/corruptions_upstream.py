"""Bugs upstream of the record, and the suite's list of them (:data:`UPSTREAM`).

Each bug is a component of the collection written wrong, so the store it produces is
self-consistent: every invariant of the data holds and the collection record agrees
with it. What catches them is re-deriving (``check --replay``), the rules of stops
and ends, the weights stamps, and the hand-off read as its trainer reads it.

* a policy client (:class:`BuggyClient`): strips the stop token of a turn that ended on
  EOS and still says ``eos``; stamps weights versions or proofs it should not;
* an environment (config subclasses that keep the real environment's name and config,
  so the store says it was made by the real one): rewards ten times too large, a
  prompt word changed, a reward function of another version, a retriever that
  returns passages in another order, a sandbox that garbles output, a success reward
  the config does not say;
* an agent loop that writes the record (:func:`rewrite_records`): two turns reordered,
  a turn appended after the end, a cut-off action passed on as finished (so it kept
  its reward), the record's weights version taken from the newest stamp;
* a hand-off writer: one that drops a group; a verl padder whose attention mask slips
  into the left padding; datum builders that forget to shift targets, masks or
  logprobs.

The bugs strike one place, chosen by slot, so the finding can be asked to name it:
``TARGET_GROUP`` (the store's second group) and ``TARGET_TRAJ``
(``support/corruption_runs.py``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenvs.envs.alfworld.config import ALFWorldConfig
from agentenvs.envs.guess_number import GuessNumberConfig, GuessNumberEnv
from agentenvs.envs.retool.config import ReToolConfig
from agentenvs.envs.retool.env import ReToolEnv
from agentenvs.envs.search_r1.config import SearchR1Config
from agentenvs.envs.search_r1.env import SearchR1Env
from agentenvs.envs.text import TextEnv, TextStep
from agentenvs.envs.tokenizing import EnvTextEncoder
from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.fingerprints import group_fingerprint
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import read_records
from agentenvs.rollout.data.advantages import group_advantages
from agentenvs.rollout.policies.base import StampedTokens
from agentenvs.rollout.trainers.jsonl.datums import DatumLine
from support.corruption_runs import (
    FORMS,
    TARGET_GROUP,
    TARGET_TRAJ,
    Bug,
    Lines,
    Writers,
    collect_run,
    sample_of,
    target_slot,
)

# ---- a policy client ------------------------------------------------------------------


def strip_stop_token(out: TokensWithLogprobs, key: str | None, traj: int, turn: int) -> TokensWithLogprobs:  # fmt: skip
    """The target trajectory's EOS-ended turns lose their EOS, still saying ``eos``."""
    if target_slot(key) and traj == TARGET_TRAJ and out.stop_reason == "eos" and out.tokens:
        logprobs = None if out.logprobs is None else out.logprobs[:-1]
        return TokensWithLogprobs(out.tokens[:-1], logprobs, "eos")
    return out


def cut_stop_sequence(out: TokensWithLogprobs, key: str | None, traj: int, turn: int) -> TokensWithLogprobs:  # fmt: skip
    """The target group's first turns lose the last token of their stop sequence and
    still say ``stop`` (a client trimming what it took for a trailing stop string)."""
    if target_slot(key) and traj == 0 and turn == 0 and out.stop_reason == "stop" and out.tokens:
        logprobs = None if out.logprobs is None else out.logprobs[:-1]
        return TokensWithLogprobs(out.tokens[:-1], logprobs, "stop")
    return out


def stamp(
    version: Any,
    proof: str | None = None,
    *,
    turn: int | None = None,
    turn_version: Any = None,
    turn_proof: str | None = None,
) -> Bug:
    """Every turn stamped with ``version`` as synced LoRA weights (with ``proof``); the
    target trajectory's ``turn`` with ``turn_version`` and ``turn_proof`` instead."""

    def bug(out: TokensWithLogprobs, key: str | None, traj: int, at: int) -> TokensWithLogprobs:
        target = target_slot(key) and traj == TARGET_TRAJ and at == turn
        given = turn_version if target and turn_version is not None else version
        proven = turn_proof if target and turn_proof is not None else proof
        marks: dict[str, Any] = {
            "weights_version": given,
            "weights": f"lora:policy-v{given}@0123abcd",
        }
        if proven is not None:
            marks["weights_proof"] = proven
        return StampedTokens(out.tokens, out.logprobs, out.stop_reason, stamp=marks)

    return bug


# ---- an environment --------------------------------------------------------------------


class TenfoldGuess(GuessNumberConfig):
    """guess_number whose rewards come out ten times too large (the config says nothing)."""

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        return _Tenfold(self.secret(task_index, split), self.low, self.high)


class _Tenfold(GuessNumberEnv):
    async def step(self, action_text: str, *, stop_reason: Any) -> TextStep:
        out = await super().step(action_text, stop_reason=stop_reason)
        return dataclasses.replace(out, reward=out.reward * 10)


class RewordedGuess(GuessNumberConfig):
    """A renderer-side bug: one word of the prompt changed, in every episode."""

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        return _Reworded(self.secret(task_index, split), self.low, self.high)


class _Reworded(GuessNumberEnv):
    def initial_messages(self) -> list[Any]:
        messages = super().initial_messages()
        return [{**m, "content": m["content"].replace("whole number", "integer")} for m in messages]


class OlderRewardGuess(GuessNumberConfig):
    """A reward function of another version (a bigger penalty for an unreadable guess)
    while the records name the installed one."""

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        return _OlderReward(self.secret(task_index, split), self.low, self.high)


class _OlderReward(GuessNumberEnv):
    async def step(self, action_text: str, *, stop_reason: Any) -> TextStep:
        out = await super().step(action_text, stop_reason=stop_reason)
        return dataclasses.replace(out, reward=-0.5) if out.reward < 0 else out


class ReversedSearch(SearchR1Config):
    """A retriever that returns the passages of each query in reverse order."""

    def make_search_env(self, task_index: int, split: str = "train", count_tokens: Any = None) -> SearchR1Env:  # fmt: skip
        env = super().make_search_env(task_index, split, count_tokens)
        return _ReversedSearch(env.task, self, env.count_tokens)


class _ReversedSearch(SearchR1Env):
    async def _search(self, queries: list[str]) -> Any:
        return [list(reversed(hits)) for hits in await super()._search(queries)]


class GarbledSandbox(ReToolConfig):
    """A sandbox whose output loses its last character."""

    def _text_env(self, task_index: int, split: str, tokenizer: Any) -> TextEnv:
        return _Garbled(self.problems(split)[task_index], self, tokenizer)


class _Garbled(ReToolEnv):
    async def _run(self, code: str) -> tuple[str, str]:
        text, status = await super()._run(code)
        return text[:-2] + text[-1:] if len(text) > 2 else text, status


class TenfoldWin(ALFWorldConfig):
    """An ALFWorld whose success reward is ten times the config's."""

    def settings(self) -> Any:
        return dataclasses.replace(super().settings(), success_reward=self.success_reward * 10)


# ---- an agent loop that writes the record ----------------------------------------------


def rewrite_records(path: Path, change: Callable[[GroupRecord], None]) -> Path:
    """The store as a buggy loop writes it: ``change`` applied to each record's group
    before it is stored, the collection record taken from the changed group (so the
    store is self-consistent)."""
    records = read_records(path)
    lines = []
    for record in records:
        change(record)
        if record.group is not None:
            record.collected = group_fingerprint(record.group)
            how = record.extra["advantage_estimator"]
            record.extra["advantages"] = group_advantages(
                record.group.total_rewards(), how["estimator"],
                normalize_std=how.get("normalize_std"), eps=how.get("eps", 1e-6),
            )  # fmt: skip
        lines.append(json.dumps(record.to_json()))
    path.write_text("\n".join(lines) + "\n")
    return path


def _target(record: GroupRecord) -> bool:
    return target_slot(record.key) and record.group is not None


def reorder_turns(record: GroupRecord) -> None:
    """The target group's first trajectory of three turns or more has turns 1 and 2
    swapped (with their rewards and metrics: the whole transitions)."""
    if not _target(record):
        return
    assert record.group is not None
    traj = next(t for t in record.group.trajectories if len(t.transitions) >= 3)
    traj.transitions[1], traj.transitions[2] = traj.transitions[2], traj.transitions[1]


def append_after_done(record: GroupRecord) -> None:
    """The target group's first trajectory gets its last turn again after the end."""
    if not _target(record):
        return
    assert record.group is not None
    traj = record.group.trajectories[0]
    last = traj.transitions[-1]
    context = list(last.ob) + list(
        last.ac.tokens
    )  # the turn extends the context, as a loop's would
    traj.transitions.append(dataclasses.replace(last, ob=context))


def pass_cut_off_on(record: GroupRecord) -> None:
    """The target group's first trajectory's last (rewarded) action was cut off by the
    token cap, but the loop passed it on as finished: it says ``length`` and kept the
    reward the task gave it."""
    if not _target(record):
        return
    assert record.group is not None
    final = record.group.trajectories[0].transitions[-1]
    final.ac = TokensWithLogprobs(final.ac.tokens, final.ac.logprobs, "length")


def claim_newest_version(lines_path: Path) -> Path:
    """A loop that records the group's weights version as its newest stamp, not its
    oldest (the store's JSON edited as that loop writes it)."""
    records = read_records(lines_path)
    for record in records:
        stamps = [v for v in record.sampled_by().versions]
        if stamps:
            record.provenance["policy"]["weights_version"] = max(stamps)
            record.provenance["policy"].pop("weights_versions", None)
    lines_path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    return lines_path


# ------------------------------------------------------------------- the suite's list

VOCABS = ("qwen2.5", "qwen3", "deepseek-v3")
PLUS_STORE = ("store", "handoff+store", "verl+store", "tinker+store", "pytrio+store")
"""The store, and every hand-off checked with it (a bug only the store can show)."""
DATUM_FORMS = ("tinker", "tinker+store", "pytrio", "pytrio+store")


@dataclass(frozen=True)
class Upstream:
    """A bug upstream of the record (see the module docstring)."""

    name: str
    run: str
    make: Callable[[Any, str, Path], Path]
    """(tokenizer, run, path) -> the store the buggy collection wrote."""
    forms: tuple[str, ...]
    where: Callable[[Lines, Any], list[str]]
    """The places a failing finding may name (prefixes of its ``where``)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Check options (``replay``, ``current_version``, ...)."""
    writers: Writers = field(default_factory=Writers)
    vocabs: tuple[str, ...] = VOCABS


def _target_line(lines: Lines) -> int:
    return next(g for g, line in enumerate(lines) if line["key"].startswith(f"{TARGET_GROUP}:"))


def _places(lines: Lines, g: int, t: int, turn: int | None = None) -> list[str]:
    """How a finding names trajectory ``t`` of line ``g`` (and its turn): by store key,
    or as a hand-off names it (group index, trajectory, sample)."""
    store = f"group {lines[g]['key']} traj {t}" + (f" turn {turn}" if turn is not None else "")
    sample = f" sample {sample_of(lines, g, t, turn)}" if turn is not None else ""
    return [store, f"group {g} traj {t}{sample}"]


def _first_turn(lines: Lines, g: int, test: Callable[[dict[str, Any]], bool]) -> tuple[int, int]:
    """(trajectory, turn) of the first transition of line ``g`` that passes ``test``."""
    for t, traj in enumerate(lines[g]["trajectories"]):
        for turn, tr in enumerate(traj["transitions"]):
            if test(tr):
                return t, turn
    raise AssertionError(f"no such turn in group {lines[g]['key']}")


def _first_reward(lines: Lines, tok: Any) -> list[str]:
    return _places(lines, 0, *_first_turn(lines, 0, lambda tr: tr["reward"] != 0))


def _first_penalty(lines: Lines, tok: Any) -> list[str]:
    return _places(lines, 0, *_first_turn(lines, 0, lambda tr: tr["reward"] < 0))


def _prompt(lines: Lines, tok: Any) -> list[str]:
    return _places(lines, 0, 0, 0)


def _first_trajectory(lines: Lines, tok: Any) -> list[str]:
    return _places(lines, 0, 0)


def _stripped(lines: Lines, tok: Any) -> list[str]:
    controls = EnvTextEncoder.for_tokenizer(tok).control_ids
    g = _target_line(lines)
    t, turn = (
        TARGET_TRAJ,
        next(
            n
            for n, tr in enumerate(lines[g]["trajectories"][TARGET_TRAJ]["transitions"])
            if tr["sampler_stop"] == "eos" and tr["ac"][-1] not in controls
        ),
    )
    return _places(lines, g, t, turn)


def _reordered(lines: Lines, tok: Any) -> list[str]:
    g = _target_line(lines)
    t = next(t for t, traj in enumerate(lines[g]["trajectories"]) if len(traj["transitions"]) >= 3)
    return _places(lines, g, t)


def _target_first(lines: Lines, tok: Any) -> list[str]:
    return _places(lines, _target_line(lines), 0)


def _cut_off(lines: Lines, tok: Any) -> list[str]:
    g = _target_line(lines)
    last = len(lines[g]["trajectories"][0]["transitions"]) - 1
    return _places(lines, g, 0, last)


def _target_turn_zero(lines: Lines, tok: Any) -> list[str]:
    return _places(lines, _target_line(lines), 0, 0)


def _target_turn_one(lines: Lines, tok: Any) -> list[str]:
    return _places(lines, _target_line(lines), TARGET_TRAJ, 1)


def _dropped(lines: Lines, tok: Any) -> list[str]:
    return [f"group {lines[_target_line(lines)]['key']} traj 0 sample 0"]


def _target_sample(lines: Lines, tok: Any) -> list[str]:
    return [f"group {_target_line(lines)} traj {TARGET_TRAJ} sample 0"]


def _is_target(group: int, traj: int, sample: int) -> bool:
    return (group, traj, sample) == (TARGET_GROUP, TARGET_TRAJ, 0)


def _target_row(batch: dict[str, Any]) -> int:
    rows = zip(batch["group_index"].tolist(), batch["traj_index"].tolist(), batch["sample_index"].tolist(), strict=True)  # fmt: skip
    return next(r for r, slot in enumerate(rows) if _is_target(*slot))


def attention_into_padding(batch: dict[str, Any]) -> dict[str, Any]:
    """A padder that places the target row's attention window one column early (into
    the left padding), with position ids counted from that mask."""
    import torch

    row = _target_row(batch)
    mask = batch["attention_mask"]
    ones = torch.nonzero(mask[row]).flatten()
    mask[row, ones[0] - 1] = 1
    mask[row, ones[-1]] = 0
    batch["position_ids"] = torch.clip(torch.cumsum(mask, dim=-1) - 1, min=0)
    return batch


def score_on_first_column(batch: dict[str, Any]) -> dict[str, Any]:
    """A padder that puts the target row's reward on its first response column."""
    row = _target_row(batch)
    scores = batch["rm_scores"]
    total = scores[row].sum()
    scores[row] = 0.0
    scores[row, 0] = total
    return batch


def _on_target(change: Callable[[DatumLine], None]) -> Callable[[DatumLine], DatumLine]:
    def apply(line: DatumLine) -> DatumLine:
        if _is_target(line.group_index, line.traj_index, line.sample_index):
            change(line)
        return line

    return apply


def _unshift(name: str) -> Callable[[DatumLine], None]:
    """A datum builder that left loss input ``name`` unshifted: value i is token i's,
    not token i + 1's."""

    def change(line: DatumLine) -> None:
        values = line.loss_fn_inputs[name]
        if name == "target_tokens":
            line.loss_fn_inputs[name] = list(line.model_input)
        else:
            line.loss_fn_inputs[name] = [type(values[0])(0), *values[:-1]]

    return change


def _unshift_mask_or_advantages(line: DatumLine) -> None:
    """Tinker's mask, or PyTRIO's advantages (what decides its trained tokens), unshifted."""
    _unshift("mask" if line.trainer == "tinker" else "advantages")(line)


def _with_bug(bug: Callable[..., Any]) -> Callable[[Any, str, Path], Path]:
    return lambda tok, run, path: collect_run(tok, run, path, bug=bug)


def _with_env(config: type) -> Callable[[Any, str, Path], Path]:
    return lambda tok, run, path: collect_run(tok, run, path, config=config)


def _with_loop(change: Callable[[Any], None], bug: Callable[..., Any] | None = None) -> Callable[[Any, str, Path], Path]:  # fmt: skip
    return lambda tok, run, path: rewrite_records(collect_run(tok, run, path, bug=bug), change)


def _clean(tok: Any, run: str, path: Path) -> Path:
    return collect_run(tok, run, path)


def _stale_claim(tok: Any, run: str, path: Path) -> Path:
    return claim_newest_version(collect_run(tok, run, path, bug=stamp(3, turn=1, turn_version=2)))


REPLAY = {"replay": True}
VERSIONS = {"current_version": 3, "max_staleness": 1}

UPSTREAM: tuple[Upstream, ...] = (
    # a policy client
    Upstream("stop_token_stripped", "chat", _with_bug(strip_stop_token), FORMS, _stripped),
    Upstream(
        "stop_token_stripped",
        "continuation",
        _with_bug(strip_stop_token),
        FORMS,
        _stripped,
        vocabs=("qwen2.5",),
    ),
    Upstream(
        "stop_token_stripped",
        "search_r1",
        _with_bug(strip_stop_token),
        FORMS,
        _stripped,
        vocabs=("deepseek-v3",),
    ),
    Upstream(
        "newer_than_current",
        "chat",
        _with_bug(stamp(4, "verified")),
        PLUS_STORE,
        _first_trajectory,
        VERSIONS,
    ),
    Upstream(
        "proof_lost",
        "chat",
        _with_bug(stamp(3, "verified", turn=1, turn_proof="lost")),
        PLUS_STORE,
        _target_turn_one,
        VERSIONS,
    ),
    Upstream(
        "stop_sequence_cut",
        "chat",
        _with_bug(cut_stop_sequence),
        PLUS_STORE,
        _target_turn_zero,
        REPLAY,
    ),
    # an environment and a reward function
    Upstream("reward_tenfold", "chat", _with_env(TenfoldGuess), PLUS_STORE, _first_reward, REPLAY),
    Upstream(
        "prompt_word_changed", "continuation", _with_env(RewordedGuess), PLUS_STORE, _prompt, REPLAY
    ),
    Upstream(
        "older_reward_version",
        "chat",
        _with_env(OlderRewardGuess),
        PLUS_STORE,
        _first_penalty,
        REPLAY,
    ),
    Upstream(
        "passages_reordered",
        "search_r1",
        _with_env(ReversedSearch),
        ("store", "handoff+store"),
        _first_trajectory,
        REPLAY,
        vocabs=("qwen3",),
    ),
    Upstream(
        "sandbox_output_garbled",
        "retool",
        _with_env(GarbledSandbox),
        ("store", "handoff+store"),
        _first_trajectory,
        REPLAY,
        vocabs=("qwen2.5",),
    ),
    Upstream(
        "success_reward_tenfold",
        "window",
        _with_env(TenfoldWin),
        ("store", "handoff+store"),
        _first_reward,
        REPLAY,
        vocabs=("deepseek-v3",),
    ),
    # an agent loop that writes the record
    Upstream("turns_reordered", "chat", _with_loop(reorder_turns), PLUS_STORE, _reordered, REPLAY),
    Upstream("turn_after_done", "chat", _with_loop(append_after_done), FORMS, _target_first),
    Upstream("cut_off_kept_reward", "chat", _with_loop(pass_cut_off_on), PLUS_STORE, _cut_off),
    Upstream(
        "stamp_older_than_record", "chat", _stale_claim, PLUS_STORE, _target_turn_one, VERSIONS
    ),
    # a hand-off writer
    Upstream(
        "group_dropped",
        "chat",
        _clean,
        PLUS_STORE[1:],
        _dropped,
        writers=Writers(keep=lambda s: s.group_index != TARGET_GROUP),
    ),
    Upstream(
        "attention_into_padding",
        "chat",
        _clean,
        ("verl", "verl+store"),
        _target_sample,
        writers=Writers(verl=attention_into_padding),
    ),
    Upstream(
        "score_on_first_column",
        "chat",
        _clean,
        ("verl", "verl+store"),
        _target_sample,
        writers=Writers(verl=score_on_first_column),
    ),
    Upstream(
        "targets_unshifted",
        "chat",
        _clean,
        DATUM_FORMS,
        _target_sample,
        writers=Writers(datums=_on_target(_unshift("target_tokens"))),
    ),
    Upstream(
        "mask_unshifted",
        "chat",
        _clean,
        DATUM_FORMS,
        _target_sample,
        writers=Writers(datums=_on_target(_unshift_mask_or_advantages)),
    ),
    Upstream(
        "logprobs_unshifted",
        "chat",
        _clean,
        DATUM_FORMS,
        _target_sample,
        writers=Writers(datums=_on_target(_unshift("logprobs"))),
    ),
)
"""Every bug upstream of the record, with the forms it must be caught in (issue 45)."""
