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
from agentenvs.rollout.data.samples import TrainingSample
from agentenvs.rollout.inspect.codec import Codec
from agentenvs.rollout.inspect.findings import Check, Finding
from agentenvs.rollout.inspect.groups import FirstFailure, GroupView

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


class TokenIdsCheck:
    """Every stored id is one the tokenizer has (padded embedding rows are not)."""

    def __init__(self, tokenizer: Any) -> None:
        self.size = EnvTextEncoder.for_tokenizer(tokenizer).vocabulary_size or len(tokenizer)
        self.first = FirstFailure()

    def add(self, view: GroupView) -> None:
        if self.first.found:
            return
        size = self.size
        for t, traj in view.trajectories():
            for turn, tr in enumerate(traj.transitions):
                for what, tokens in (("sampled", tr.ac.tokens), ("observation", tr.ob)):
                    if tokens and max(tokens) >= size:
                        pos = next(i for i, tok in enumerate(tokens) if tok >= size)
                        self.first.keep(
                            Finding(
                                Check.FIXED_TRAJECTORY,
                                "fail",
                                f"{what} id {tokens[pos]} is outside the tokenizer's {size} ids "
                                "(an embedding row past the vocabulary): it decodes to nothing",
                                f"{view.where(t, turn)} {what} token {pos}",
                            )
                        )
                        return

    def findings(self) -> list[Finding]:
        if self.first.finding is not None:
            return [self.first.finding]
        detail = f"every id is within the {self.size}-id vocabulary"
        return [Finding(Check.FIXED_TRAJECTORY, "pass", detail)]


class ObservationControlsCheck:
    """A control id in an observation must be one the template's markup put there.

    The renderer records where it placed them; under the continuation renderer an
    appended observation is all environment text, so it holds none. Any other
    control id is environment text that became a control token.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.encoder = EnvTextEncoder.for_tokenizer(tokenizer)
        self.renderer: str | None = None
        self.checked = self.unverified = 0
        self.first = FirstFailure()

    def add(self, view: GroupView) -> None:
        if self.renderer is None:
            self.renderer = (view.record.provenance.get("env") or {}).get("renderer") or ""
        if self.first.found:
            return
        for t, traj in view.trajectories():
            for span in new_tokens(traj):
                if span.recorded is not None:
                    allowed = {int(p) for p in str(span.recorded).split(",") if p}
                elif self.renderer == "continuation" and not span.restart:
                    allowed = set()
                else:
                    self.unverified += 1
                    continue
                self.checked += 1
                extra = [p for p in self.encoder.control_positions(span.tokens) if p not in allowed]
                if extra:
                    token = span.tokens[extra[0]]
                    name = self.tokenizer.convert_ids_to_tokens(token)
                    self.first.keep(
                        Finding(
                            Check.FIXED_TRAJECTORY,
                            "fail",
                            f"control token {token} ({name!r}) in an observation where the "
                            "template placed none: environment text became a control token",
                            f"{view.where(t, span.turn)} token {span.start + extra[0]}",
                        )
                    )
                    return

    def findings(self) -> list[Finding]:
        if self.first.finding is not None:
            return [self.first.finding]
        if not self.checked:
            detail = "no control-token record to check against"
            return [Finding(Check.FIXED_TRAJECTORY, "warn", detail)]
        detail = f"{self.checked} observation spans hold only the template's control tokens"
        if self.unverified:
            detail += f" ({self.unverified} spans without a record not checked)"
        return [Finding(Check.FIXED_TRAJECTORY, "pass", detail)]


def _first_difference(a: Sequence[Any], b: Sequence[Any]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


class SplitPointsCheck:
    """Samples split exactly at the recorded prefix breaks, and each break is real."""

    def __init__(self, tokenizer: Any) -> None:
        self.codec = Codec.of(tokenizer) if tokenizer is not None else None
        self.needless: str | None = None
        self.breaks = 0
        self.first = FirstFailure()

    def add(self, view: GroupView) -> None:
        if self.first.found:
            return
        counted: dict[int, int] = {}
        for sample in view.samples:
            counted[sample.traj_index] = counted.get(sample.traj_index, 0) + 1
        for t, traj in view.trajectories():
            if t not in counted:
                continue  # logprobs that do not fit: reported by fixed_trajectory
            breaks = sum(1 for tr in traj.transitions if tr.metrics.get(PREFIX_BREAK_METRIC))
            self.breaks += breaks
            if counted[t] != 1 + breaks:
                self.first.keep(
                    Finding(
                        Check.RE_RENDERING,
                        "fail",
                        f"{counted[t]} samples but {breaks} recorded prefix breaks: the context "
                        "was rewritten without the collector knowing",
                        view.where(t),
                    )
                )
                return
            if breaks and self.needless is None and self.codec is not None:
                self.needless = _needless_break(traj, self.codec, view.where(t))

    def findings(self) -> list[Finding]:
        if self.first.finding is not None:
            return [self.first.finding]
        found = []
        if self.needless is not None:
            found.append(
                Finding(
                    Check.RE_RENDERING,
                    "warn",
                    "a prefix break where the new context's text extends the old one: the "
                    "renderer re-encoded a context it could have extended",
                    self.needless,
                )
            )
        detail = (
            f"samples split exactly at the {self.breaks} recorded prefix breaks; every sample "
            "holds the tokens the policy saw and sampled"
        )
        return [*found, Finding(Check.RE_RENDERING, "pass", detail)]


def _needless_break(traj: Any, codec: Codec, where: str) -> str | None:
    for span in new_tokens(traj):
        if span.restart and span.turn > 0:
            before = traj.transitions[span.turn - 1]
            old = codec.decode(before.ob + before.ac.tokens)
            if codec.decode(span.tokens).startswith(old):
                return f"{where} turn {span.turn}"
    return None


class TextRoundTripCheck:
    """Does decode -> encode of each sample give its tokens back? Information for
    token-level trainers (measured on the first ``limit`` samples); a failure when
    ``text_trainer`` asks for compatibility (every sample is measured then)."""

    def __init__(self, tokenizer: Any, *, text_trainer: bool, limit: int | None) -> None:
        self.codec = Codec.of(tokenizer)
        self.text_trainer = text_trainer
        self.limit = None if text_trainer else limit
        self.measured = self.differing = self.total = 0
        self.first = ""

    def add(self, view: GroupView) -> None:
        self.add_samples(view.key, view.samples)

    def add_samples(self, key: str, samples: Sequence[TrainingSample]) -> None:
        self.total += len(samples)
        room = len(samples) if self.limit is None else max(0, self.limit - self.measured)
        batch = list(samples[:room])
        if not batch:
            return
        self.measured += len(batch)
        again = self.codec.encode_batch(self.codec.decode_batch([s.tokens for s in batch]))
        for sample, ids in zip(batch, again, strict=True):
            if ids != sample.tokens:
                self.differing += 1
                if not self.first:
                    pos = _first_difference(ids, sample.tokens)
                    self.first = (
                        f"group {key or sample.group_index} traj {sample.traj_index} "
                        f"sample {sample.sample_index} token {pos}"
                    )

    def findings(self) -> list[Finding]:
        of = f"{self.measured}" if self.measured == self.total else (
            f"{self.measured} measured (the first; of {self.total})"
        )  # fmt: skip
        if not self.differing:
            detail = f"re-tokenizing the decoded text reproduces all {of}"
            return [Finding(Check.RE_RENDERING, "pass", detail)]
        detail = (
            f"{self.differing} of {of} samples re-tokenize to other ids from their decoded text; "
        )
        if self.text_trainer:
            detail += (
                "a trainer that re-tokenizes text would train on tokens the policy never saw "
                "(--text-trainer)"
            )
            return [Finding(Check.RE_RENDERING, "fail", detail, self.first)]
        detail += (
            "expected with byte-level BPE; token-level trainers use the stored ids (pass "
            "--text-trainer to require a round trip of every sample)"
        )
        return [Finding(Check.RE_RENDERING, "info", detail, self.first)]
