"""The corruption suite of ``agentenvs check`` (issues 31, 45): real runs, and every way to spoil them.

The runs and their hand-off forms are ``support/corruption_runs.py``. Two kinds of
corruption. A :class:`Corruption` (here) edits one stored file as a converter or a
hand edit would, at a realistic magnitude (one value, one token, one line), and
returns what the finding must name; ``caught`` says where: ``store`` (the trajectory
store), ``handoff`` (a hand-off checked alone, with ``--tokenizer``), ``handoff+store``
(with ``--store``). An :class:`~support.corruptions_upstream.Upstream` corruption
(:data:`UPSTREAM`) is a bug upstream of the record (a policy client, an environment, a
reward function, an agent loop, a hand-off writer), so the store it makes is
self-consistent; it is caught in every form it fits (:data:`FORMS`). A new finding
comes with its corruption here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentenvs.envs.tokenizing import EnvTextEncoder
from support.corruption_runs import (
    FORMS,
    RUNS,
    Lines,
    collect_run,
    form_files,
    read_lines,
    sample_of,
    write_forms,
    write_handoff,
    write_lines,
)
from support.corruptions_upstream import UPSTREAM, Upstream

__all__ = [
    "CORRUPTIONS", "FORMS", "RUNS", "UPSTREAM", "Corruption", "Upstream", "collect_run",
    "form_files", "read_lines", "write_forms", "write_handoff", "write_lines",
]  # fmt: skip


# ---------------------------------------------------------------------------- helpers


def _plain_index(tokenizer: Any, tokens: list[int], start: int = 0) -> int:
    controls = EnvTextEncoder.for_tokenizer(tokenizer).control_ids
    return next(i for i in range(start, len(tokens)) if tokens[i] not in controls)


def _plain_token(tokenizer: Any) -> int:
    return tokenizer.encode(" banana", add_special_tokens=False)[0]


def _multi_turn(lines: Lines) -> tuple[int, int]:
    """(line, trajectory) of the first trajectory with at least two turns."""
    for g, line in enumerate(lines):
        for t, traj in enumerate(line["trajectories"]):
            if len(traj["transitions"]) >= 2:
                return g, t
    raise AssertionError("no multi-turn trajectory")


def _turn_where(lines: Lines, g: int, t: int, turn: int) -> str:
    return f"group {lines[g]['key']} traj {t} sample {sample_of(lines, g, t, turn)} turn {turn}"


def _trajectories_with_different_rewards(lines: Lines) -> tuple[int, int, int]:
    for g, line in enumerate(lines):
        totals = line["total_rewards"]
        for a in range(len(totals)):
            for b in range(a + 1, len(totals)):
                if totals[a] != totals[b]:
                    return g, a, b
    raise AssertionError("no group with different rewards")


def _span(line: dict[str, Any], which: int = 0) -> tuple[int, int]:
    """[start, end) of the ``which``-th run of mask 1 in a hand-off line."""
    mask, runs, start = line["loss_mask"], [], None
    for i, m in enumerate([*mask, 0]):
        if m == 1 and start is None:
            start = i
        elif m != 1 and start is not None:
            runs.append((start, i))
            start = None
    return runs[which]


def _environment_position(line: dict[str, Any]) -> int:
    """An environment token: after the first sampled span, or in the prompt when the
    sample ends with it (ALFWorld's window mode: one turn per sample)."""
    start, end = _span(line)
    return end + 1 if end + 1 < len(line["tokens"]) else start - 2


def _shift_later_prefixes(traj: dict[str, Any], turn: int, delta: int) -> None:
    """Keep the delta encoding of the turns after ``turn`` consistent with an
    observation that grew or shrank by ``delta`` tokens."""
    for tr in traj["transitions"][turn + 1 :]:
        if tr["ob_prefix"] == 0:
            break
        tr["ob_prefix"] += delta


def _where(line: dict[str, Any], token: int | None = None) -> str:
    head = f"traj {line['traj_index']} sample {line['sample_index']}"
    return head if token is None else f"{head} token {token}"


# --------------------------------------------------------------------- store corruptions


def _store_logprob(value: float) -> Callable[[Lines, Any], str]:
    def edit(lines: Lines, tok: Any) -> str:
        lines[1]["trajectories"][2]["transitions"][0]["logprobs"][1] = value
        return f"group {lines[1]['key']} traj 2 turn 0 token 1"

    return edit


def store_logprob_shift(lines: Lines, tok: Any) -> str:
    """Logprobs of one action rotated by one position: lengths and signs intact."""
    g, t = _multi_turn(lines)
    tr = lines[g]["trajectories"][t]["transitions"][1]
    tr["logprobs"] = [*tr["logprobs"][1:], tr["logprobs"][0]]
    return _turn_where(lines, g, t, 1)


def store_duplicate_line(lines: Lines, tok: Any) -> str:
    lines.append(copy.deepcopy(lines[1]))
    return f"group {lines[1]['key']}"


def store_duplicate_key(lines: Lines, tok: Any) -> str:
    lines[2]["key"] = lines[0]["key"]
    return f"group {lines[0]['key']}"


def store_extra_observation_token(lines: Lines, tok: Any) -> str:
    """One plain token appended to an observation (under the continuation renderer no
    end-of-turn marker moves, so only the collected length tells)."""
    g, t = _multi_turn(lines)
    tr = lines[g]["trajectories"][t]["transitions"][1]
    tr["ob_new"].append(_plain_token(tok))
    _shift_later_prefixes(lines[g]["trajectories"][t], 1, +1)
    return _turn_where(lines, g, t, 1)


def store_dropped_observation_token(lines: Lines, tok: Any) -> str:
    g, t = _multi_turn(lines)
    tr = lines[g]["trajectories"][t]["transitions"][1]
    del tr["ob_new"][_plain_index(tok, tr["ob_new"])]
    _shift_later_prefixes(lines[g]["trajectories"][t], 1, -1)
    return _turn_where(lines, g, t, 1)


def store_control_id(lines: Lines, tok: Any) -> str:
    """A plain observation token replaced by the end-of-turn control id."""
    g, t = _multi_turn(lines)
    tr = lines[g]["trajectories"][t]["transitions"][1]
    pos = _plain_index(tok, tr["ob_new"])
    tr["ob_new"][pos] = tok.eos_token_id
    return f"group {lines[g]['key']} traj {t}"


def store_out_of_vocabulary(lines: Lines, tok: Any) -> str:
    lines[0]["trajectories"][1]["transitions"][0]["ac"][1] = len(tok) + 7
    return f"group {lines[0]['key']} traj 1"


def store_swapped_rewards(lines: Lines, tok: Any) -> str:
    """Two trajectories' rewards swapped with their advantages and totals: every
    stored number is consistent with every other, but not with what was collected."""
    g, a, b = _trajectories_with_different_rewards(lines)
    line = lines[g]
    ta, tb = (line["trajectories"][i]["transitions"] for i in (a, b))
    ra, rb = ([tr["reward"] for tr in tt] for tt in (ta, tb))
    # Move the whole reward of each onto the other's last step.
    for tt, other in ((ta, rb), (tb, ra)):
        for tr in tt:
            tr["reward"] = 0.0
        tt[-1]["reward"] = sum(other)
    adv = line["extra"]["advantages"]
    adv[a], adv[b] = adv[b], adv[a]
    totals = line["total_rewards"]
    totals[a], totals[b] = totals[b], totals[a]
    return f"group {line['key']} traj {a}"


def store_total_rewards(lines: Lines, tok: Any) -> str:
    lines[1]["total_rewards"][0] += 1.0
    return f"group {lines[1]['key']} traj 0"


def store_config_edited(lines: Lines, tok: Any) -> str:
    config = lines[2]["provenance"]["env"]["config"]
    config["seed"] = int(config.get("seed") or 0) + 1
    return f"group {lines[2]['key']}"


def store_dropped_trajectory(lines: Lines, tok: Any) -> str:
    line = lines[1]
    for field in ("trajectories", "group_rewards", "group_metrics", "total_rewards"):
        del line[field][-1]
    del line["extra"]["advantages"][-1]
    return f"group {line['key']}"


def store_unrecorded_break(lines: Lines, tok: Any) -> str:
    g, t = _multi_turn(lines)
    first, tr = lines[g]["trajectories"][t]["transitions"][:2]
    full = (first["ob_new"] + first["ac"])[: tr["ob_prefix"]] + tr["ob_new"]
    tr["ob_new"], tr["ob_prefix"] = full[5:], 0  # no longer extends turn 0
    _shift_later_prefixes(lines[g]["trajectories"][t], 1, -5)
    return f"group {lines[g]['key']} traj {t}"


def store_ob_prefix_off_by_one(lines: Lines, tok: Any) -> str:
    """The delta encoding claims one token more of the previous context than there is."""
    for line in lines:
        for t, traj in enumerate(line["trajectories"]):
            for turn, tr in enumerate(traj["transitions"]):
                if tr["ob_prefix"] > 0:
                    tr["ob_prefix"] += 1
                    return f"group {line['key']} traj {t} turn {turn}"
    raise AssertionError("no delta-encoded observation")


def store_logprobs_invented(lines: Lines, tok: Any) -> str:
    """Logprobs written onto an action of a run that had none (a converter filling a gap)."""
    tr = lines[1]["trajectories"][1]["transitions"][0]
    assert tr["logprobs"] is None
    tr["logprobs"] = [0.0] * len(tr["ac"])
    return f"group {lines[1]['key']} traj 1"


# ------------------------------------------------------------------- hand-off corruptions


def _handoff_logprob(value: float) -> Callable[[Lines, Any], str]:
    def edit(lines: Lines, tok: Any) -> str:
        start, _ = _span(lines[2])
        lines[2]["logprobs"][start + 1] = value
        return _where(lines[2], start + 1)

    return edit


def handoff_logprob_shift_in_span(lines: Lines, tok: Any) -> str:
    """Inside the last sampled span only: zeros stay on environment tokens."""
    line = lines[1]
    start, end = _span(line, -1)
    lp = line["logprobs"]
    lp[start:end] = [*lp[start + 1 : end], lp[start]]
    return _where(line, start)


def handoff_logprob_shift_whole(lines: Lines, tok: Any) -> str:
    line = lines[0]
    line["logprobs"] = [*line["logprobs"][1:], 0.0]
    return _where(line)


def handoff_logprobs_claimed(lines: Lines, tok: Any) -> str:
    """``has_logprobs`` set on a sample whose policy gave none: a trainer would read its
    stand-in 0.0s as the sampler's logprobs (probability 1)."""
    line = lines[1]
    assert line["has_logprobs"] is False
    line["has_logprobs"] = True
    return _where(line, _span(line)[0])


def handoff_duplicate_line(lines: Lines, tok: Any) -> str:
    lines.append(copy.deepcopy(lines[3]))
    return _where(lines[3])


def handoff_duplicate_slot(lines: Lines, tok: Any) -> str:
    for key in ("group_index", "traj_index", "sample_index"):
        lines[4][key] = lines[3][key]
    return _where(lines[3])


def handoff_dropped_token(lines: Lines, tok: Any) -> str:
    line = lines[1]
    pos = _environment_position(line)
    for name in ("tokens", "loss_mask", "logprobs", "advantages"):
        del line[name][pos]
    return _where(line, pos)


def handoff_inserted_token(lines: Lines, tok: Any) -> str:
    line = lines[1]
    pos = _environment_position(line)
    for name, value in (("tokens", _plain_token(tok)), ("loss_mask", 0), ("logprobs", 0.0),
                        ("advantages", 0.0)):  # fmt: skip
        line[name].insert(pos, value)
    return _where(line, pos)


def handoff_control_id(lines: Lines, tok: Any) -> str:
    line = lines[1]
    pos = _environment_position(line)
    pos = _plain_index(tok, line["tokens"], pos) if pos > _span(line)[0] else pos
    line["tokens"][pos] = tok.eos_token_id
    return _where(line, pos)


def handoff_out_of_vocabulary(lines: Lines, tok: Any) -> str:
    line = lines[2]
    start, _ = _span(line)
    line["tokens"][start] = len(tok) + 7
    return _where(line, start)


def handoff_swapped_rewards(lines: Lines, tok: Any) -> str:
    """Two trajectories of a group exchange reward and advantage (every sample of each)."""
    by_traj: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for line in lines:
        by_traj.setdefault((line["group_index"], line["traj_index"]), []).append(line)
    for (g, a), first in by_traj.items():
        for (h, b), second in by_traj.items():
            if h == g and b > a and first[0]["reward"] != second[0]["reward"]:
                ra, aa = first[0]["reward"], first[0]["advantage"]
                rb, ab = second[0]["reward"], second[0]["advantage"]
                for group, reward, adv in ((first, rb, ab), (second, ra, aa)):
                    for line in group:
                        line["reward"], line["advantage"] = reward, adv
                        line["advantages"] = [adv if m else 0.0 for m in line["loss_mask"]]
                return _where(first[0])
    raise AssertionError("no group with different rewards")


def handoff_earlier_sample_advantage(lines: Lines, tok: Any) -> str:
    """A trajectory cut into several samples: an earlier sample carries another value."""
    later = {(ln["group_index"], ln["traj_index"]) for ln in lines if ln["sample_index"] > 0}
    line = next(ln for ln in lines if (ln["group_index"], ln["traj_index"]) in later)
    line["advantage"] += 0.5
    line["advantages"] = [line["advantage"] if m else 0.0 for m in line["loss_mask"]]
    return f"traj {line['traj_index']} sample 1"


def handoff_mask_on_observation(lines: Lines, tok: Any) -> str:
    line = lines[1]
    pos = _environment_position(line)
    line["loss_mask"][pos] = 1
    line["advantages"][pos] = line["advantage"]
    return _where(line, pos)


@dataclass(frozen=True)
class Corruption:
    name: str
    target: str
    """``store`` or ``handoff``: the file it edits."""
    edit: Callable[[Lines, Any], str]
    runs: tuple[str, ...]
    """The runs it applies to (see :data:`RUNS`)."""
    caught: tuple[str, ...]
    """Forms it must fail in: ``store``; for a hand-off ``handoff`` and ``handoff+store``."""
    unreadable: bool = False
    """The edit makes the store unreadable: the error must name the place."""


CHAT = ("chat", "continuation")
ALL = ("chat", "continuation", "window")
NO_LOGPROBS = ("nologprobs",)
BOTH = ("handoff", "handoff+store")


def _store(name: str, edit: Callable[[Lines, Any], str], runs: tuple[str, ...] = ALL,
           **kwargs: Any) -> Corruption:  # fmt: skip
    return Corruption(name, "store", edit, runs, ("store",), **kwargs)


def _handoff(
    name: str, edit: Callable[[Lines, Any], str], runs: tuple[str, ...] = ALL
) -> Corruption:
    return Corruption(name, "handoff", edit, runs, BOTH)


CORRUPTIONS: tuple[Corruption, ...] = (
    _store("logprob_nan", _store_logprob(float("nan")), CHAT),
    _store("logprob_positive", _store_logprob(0.7), CHAT),
    _store("logprob_inf", _store_logprob(float("-inf")), CHAT),
    _store("logprob_shift", store_logprob_shift),
    _store("duplicate_line", store_duplicate_line),
    _store("duplicate_key", store_duplicate_key),
    _store("extra_observation_token", store_extra_observation_token),
    _store("dropped_observation_token", store_dropped_observation_token),
    _store("control_id", store_control_id),
    _store("out_of_vocabulary", store_out_of_vocabulary),
    _store("swapped_rewards", store_swapped_rewards, CHAT),
    _store("total_rewards", store_total_rewards),
    _store("config_edited", store_config_edited),
    _store("dropped_trajectory", store_dropped_trajectory),
    _store("unrecorded_break", store_unrecorded_break, CHAT),
    _store("ob_prefix_off_by_one", store_ob_prefix_off_by_one, CHAT, unreadable=True),
    _store("logprobs_invented", store_logprobs_invented, NO_LOGPROBS),
    _store("nologprobs_dropped_observation_token", store_dropped_observation_token, NO_LOGPROBS),
    _store("nologprobs_swapped_rewards", store_swapped_rewards, NO_LOGPROBS),
    _handoff("logprob_nan", _handoff_logprob(float("nan")), CHAT),
    _handoff("logprob_positive", _handoff_logprob(0.7), CHAT),
    _handoff("logprob_shift_in_span", handoff_logprob_shift_in_span),
    _handoff("logprob_shift_whole", handoff_logprob_shift_whole),
    _handoff("duplicate_line", handoff_duplicate_line),
    _handoff("duplicate_slot", handoff_duplicate_slot),
    _handoff("dropped_token", handoff_dropped_token),
    _handoff("inserted_token", handoff_inserted_token),
    _handoff("control_id", handoff_control_id),
    _handoff("out_of_vocabulary", handoff_out_of_vocabulary),
    _handoff("swapped_rewards", handoff_swapped_rewards, CHAT),
    _handoff("earlier_sample_advantage", handoff_earlier_sample_advantage, ("window",)),
    _handoff("mask_on_observation", handoff_mask_on_observation),
    _handoff("logprobs_claimed", handoff_logprobs_claimed, NO_LOGPROBS),
    _handoff("nologprobs_dropped_token", handoff_dropped_token, NO_LOGPROBS),
    _handoff("nologprobs_mask_on_observation", handoff_mask_on_observation, NO_LOGPROBS),
)
