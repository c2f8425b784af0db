"""Token-level checks of stored trajectories: ids, control tokens, split points, round trips.

What a token-level trainer needs is that each sample holds exactly the tokens the
policy saw and sampled: observations as the renderer appended them, actions as
the sampler returned them, split only where the context was really rewritten.
Those are judged here from the stored transitions alone. Whether *decoded text*
re-tokenizes to the same ids is a different question, one that matters only to
trainers that re-tokenize text; with a real byte-level BPE the answer is usually
no (a sampled ``>`` followed by an observation's ``\\n\\n`` re-tokenizes as one
``>\\n\\n`` token), so it is reported, and fails only when asked for.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from agentenvs.envs.rendered_env import OBSERVATION_CONTROLS_LOG, PROMPT_CONTROLS_LOG
from agentenvs.envs.tokenizing import EnvTextEncoder
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.data.samples import TrainingSample, trajectory_to_samples
from agentenvs.rollout.inspect.findings import Check, Finding

PREFIX_BREAK_METRIC = "renderer/prefix_breaks"


@dataclass
class NewTokens:
    """Tokens that entered the context before one action: the prompt, an appended
    observation, or a whole re-rendered context after a prefix break."""

    turn: int
    start: int
    """Offset of these tokens in the transition's observation."""
    tokens: list[int]
    recorded: str | None
    """The renderer's record of where it placed control tokens, if stored."""
    restart: bool


def _trajectories(records: Sequence[GroupRecord]) -> Iterator[tuple[str, int, Any]]:
    for record in records:
        for t, traj in enumerate(record.group.trajectories if record.group else []):
            yield record.key, t, traj


def new_tokens(traj: Any) -> Iterator[NewTokens]:
    """Walk a trajectory's observations, yielding what each added to the context."""
    previous: list[int] | None = None
    for turn, tr in enumerate(traj.transitions):
        ob = tr.ob
        if previous is None:
            yield NewTokens(turn, 0, ob, tr.logs.get(PROMPT_CONTROLS_LOG), True)
        else:
            record = traj.transitions[turn - 1].logs.get(OBSERVATION_CONTROLS_LOG)
            n = len(previous)
            if len(ob) >= n and ob[:n] == previous:
                yield NewTokens(turn, n, ob[n:], record, False)
            else:
                yield NewTokens(turn, 0, ob, record, True)
        previous = ob + tr.ac.tokens


def check_token_ids(records: Sequence[GroupRecord], tokenizer: Any) -> Finding:
    """Every stored id is one the tokenizer has (padded embedding rows are not)."""
    size = EnvTextEncoder.for_tokenizer(tokenizer).vocabulary_size or len(tokenizer)
    for key, t, traj in _trajectories(records):
        for turn, tr in enumerate(traj.transitions):
            for what, tokens in (("sampled", tr.ac.tokens), ("observation", tr.ob)):
                if tokens and max(tokens) >= size:
                    pos = next(i for i, tok in enumerate(tokens) if tok >= size)
                    return Finding(
                        Check.FIXED_TRAJECTORY,
                        "fail",
                        f"{what} id {tokens[pos]} is outside the tokenizer's {size} ids "
                        "(an embedding row past the vocabulary): it decodes to nothing",
                        f"group {key} traj {t} turn {turn} {what} token {pos}",
                    )
    return Finding(Check.FIXED_TRAJECTORY, "pass", f"every id is within the {size}-id vocabulary")


def check_observation_controls(
    records: Sequence[GroupRecord], tokenizer: Any, renderer: str | None
) -> Finding:
    """A control id in an observation must be one the template's markup put there.

    The renderer records where it placed them; under the continuation renderer an
    appended observation is all environment text, so it holds none. Any other
    control id is environment text that became a control token.
    """
    encoder = EnvTextEncoder.for_tokenizer(tokenizer)
    checked = unverified = 0
    for key, t, traj in _trajectories(records):
        for span in new_tokens(traj):
            found = encoder.control_positions(span.tokens)
            if span.recorded is not None:
                allowed = {int(p) for p in str(span.recorded).split(",") if p}
            elif renderer == "continuation" and not span.restart:
                allowed = set()
            else:
                unverified += 1
                continue
            checked += 1
            extra = [p for p in found if p not in allowed]
            if extra:
                pos = extra[0]
                token = span.tokens[pos]
                return Finding(
                    Check.FIXED_TRAJECTORY,
                    "fail",
                    f"control token {token} ({tokenizer.convert_ids_to_tokens(token)!r}) in an "
                    "observation where the template placed none: environment text became a "
                    "control token",
                    f"group {key} traj {t} turn {span.turn} token {span.start + pos}",
                )
    if not checked:
        return Finding(Check.FIXED_TRAJECTORY, "warn", "no control-token record to check against")
    detail = f"{checked} observation spans hold only the template's control tokens"
    if unverified:
        detail += f" ({unverified} spans without a record not checked)"
    return Finding(Check.FIXED_TRAJECTORY, "pass", detail)


def _first_difference(a: Sequence[Any], b: Sequence[Any]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def check_split_points(records: Sequence[GroupRecord], tokenizer: Any) -> list[Finding]:
    """Samples split exactly at the recorded prefix breaks, and each break is real."""
    needless = None
    breaks_total = 0
    for key, t, traj in _trajectories(records):
        try:
            samples = trajectory_to_samples(traj, 0.0)
        except ValueError:
            continue  # logprobs do not fit; reported by fixed_trajectory
        breaks = sum(1 for tr in traj.transitions if tr.metrics.get(PREFIX_BREAK_METRIC))
        breaks_total += breaks
        if len(samples) != 1 + breaks:
            return [
                Finding(
                    Check.RE_RENDERING,
                    "fail",
                    f"{len(samples)} samples but {breaks} recorded prefix breaks: the context "
                    "was rewritten without the collector knowing",
                    f"group {key} traj {t}",
                )
            ]
        if breaks and needless is None:
            needless = _needless_break(traj, tokenizer, key, t)
    findings = []
    if needless is not None:
        findings.append(
            Finding(
                Check.RE_RENDERING,
                "warn",
                "a prefix break where the new context's text extends the old one: the "
                "renderer re-encoded a context it could have extended",
                needless,
            )
        )
    findings.append(
        Finding(
            Check.RE_RENDERING,
            "pass",
            f"samples split exactly at the {breaks_total} recorded prefix breaks; every sample "
            "holds the tokens the policy saw and sampled",
        )
    )
    return findings


def _needless_break(traj: Any, tokenizer: Any, key: str, t: int) -> str | None:
    for span in new_tokens(traj):
        if span.restart and span.turn > 0:
            before = traj.transitions[span.turn - 1]
            old = tokenizer.decode(before.ob + before.ac.tokens, skip_special_tokens=False)
            new = tokenizer.decode(span.tokens, skip_special_tokens=False)
            if new.startswith(old):
                return f"group {key} traj {t} turn {span.turn}"
    return None


def check_text_round_trip(
    samples: Sequence[tuple[str, TrainingSample]], tokenizer: Any, *, text_trainer: bool
) -> Finding:
    """Does decode -> encode of each sample give its tokens back? Information for
    token-level trainers; a failure when ``text_trainer`` asks for compatibility."""
    differing = 0
    first = ""
    for key, sample in samples:
        text = tokenizer.decode(sample.tokens, skip_special_tokens=False)
        again = list(tokenizer.encode(text, add_special_tokens=False))
        if again != sample.tokens:
            differing += 1
            if not first:
                pos = _first_difference(again, sample.tokens)
                first = (
                    f"group {key} traj {sample.traj_index} sample {sample.sample_index} token {pos}"
                )
    if not differing:
        return Finding(
            Check.RE_RENDERING,
            "pass",
            f"re-tokenizing the decoded text reproduces all {len(samples)}",
        )
    detail = (
        f"{differing} of {len(samples)} samples re-tokenize to other ids from their decoded text; "
    )
    if text_trainer:
        return Finding(
            Check.RE_RENDERING,
            "fail",
            detail + "a trainer that re-tokenizes text would train on tokens the policy "
            "never saw (--text-trainer)",
            first,
        )
    return Finding(
        Check.RE_RENDERING,
        "info",
        detail + "expected with byte-level BPE; token-level trainers use the stored ids "
        "(pass --text-trainer to require a round trip)",
        first,
    )
