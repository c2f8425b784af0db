"""Hypothesis strategies for trajectory groups with known expected samples (shared by the samples and hand-off tests)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.data.samples import PARSE_ERROR_MASKED_METRIC

TOKEN = st.integers(min_value=0, max_value=50_000)


LOGPROB = st.floats(min_value=-30.0, max_value=0.0, allow_nan=False, allow_infinity=False)


@dataclass
class ExpectedSample:
    tokens: list[int] = field(default_factory=list)
    sampled: list[bool] = field(default_factory=list)
    """True on tokens the policy sampled (whether or not the loss trains them)."""
    trained: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    has_logprobs: bool = True

    @property
    def prompt_length(self) -> int:
        return self.sampled.index(True) if True in self.sampled else len(self.tokens)

    def add(self, tokens, *, sampled=False, trained=False, logprobs=None) -> None:
        self.tokens += tokens
        self.sampled += [sampled] * len(tokens)
        self.trained += [trained] * len(tokens)
        self.logprobs += list(logprobs) if logprobs is not None else [0.0] * len(tokens)


@dataclass
class Scenario:
    trajectory: Trajectory
    expected: list[ExpectedSample]
    prefix_breaks: int


@st.composite
def scenarios(
    draw,
    *,
    max_turns: int = 5,
    allow_missing_logprobs: bool = True,
    allow_empty_actions: bool = False,
    allow_parse_masks: bool = True,
    allow_breaks: bool = True,
) -> Scenario:
    """One random multi-turn trajectory and the samples it must give."""
    prompt = draw(st.lists(TOKEN, min_size=1, max_size=20))
    context = list(prompt)
    current = ExpectedSample()
    current.add(prompt)
    expected = [current]
    transitions = []
    breaks = 0
    for turn in range(draw(st.integers(1, max_turns))):
        if turn == 0:
            ob = list(prompt)
        elif allow_breaks and draw(st.integers(0, 3)) == 0:
            # Not an extension: some earlier token differs (a template that rewrote history).
            cut = draw(st.integers(0, len(context) - 1))
            replacement = draw(TOKEN.filter(lambda t, old=context[cut]: t != old))
            tail = draw(st.lists(TOKEN, max_size=10))
            ob = [*context[:cut], replacement, *tail]
            current = ExpectedSample()
            current.add(ob)
            expected.append(current)
            breaks += 1
        else:
            observation = draw(st.lists(TOKEN, max_size=12))
            ob = context + observation
            current.add(observation)
        action = draw(st.lists(TOKEN, min_size=0 if allow_empty_actions else 1, max_size=12))
        missing = allow_missing_logprobs and draw(st.integers(0, 3)) == 0
        logprobs = (
            None if missing else draw(st.lists(LOGPROB, min_size=len(action), max_size=len(action)))
        )
        masked = allow_parse_masks and draw(st.integers(0, 5)) == 0
        current.add(action, sampled=True, trained=not masked, logprobs=logprobs)
        if missing and action:
            current.has_logprobs = False
        metrics = {PARSE_ERROR_MASKED_METRIC: 1} if masked else {}
        if draw(st.booleans()):
            metrics["turns"] = turn + 1  # unrelated metrics must not matter
        transitions.append(
            Transition(
                ob=ob,
                ac=TokensWithLogprobs(
                    action, logprobs, draw(st.sampled_from(["stop", "eos", "length"]))
                ),
                reward=draw(st.sampled_from([0.0, 0.25, -0.5, 1.0])),
                episode_done=False,
                metrics=metrics,
            )
        )
        context = ob + action
    transitions[-1].episode_done = True
    return Scenario(Trajectory(transitions, final_ob=[]), expected, breaks)


@st.composite
def batches(draw, *, max_groups: int = 3, max_group_size: int = 4, dyadic: bool = False, **kw):
    """Groups of scenarios with group rewards: ``(groups, scenarios per group)``.

    ``dyadic`` makes every total reward one of 0, +-0.5, +-1 and every group size a
    power of two, so group means are exact in float32 as well as float64.
    """
    groups, per_group = [], []
    reward = st.sampled_from([0.0, 0.5, 1.0, -1.0]) if dyadic else st.floats(-2, 2, allow_nan=False)
    for _ in range(draw(st.integers(1, max_groups))):
        if dyadic:  # a power-of-two group size keeps the group mean exact in float32
            size = draw(st.sampled_from([g for g in (1, 2, 4, 8) if g <= max_group_size]))
            found = draw(st.lists(scenarios(**kw), min_size=size, max_size=size))
        else:
            found = draw(st.lists(scenarios(**kw), min_size=1, max_size=max_group_size))
        trajectories = [s.trajectory for s in found]
        if dyadic:
            for traj in trajectories:
                for tr in traj.transitions:
                    tr.reward = 0.0
        rewards = [draw(reward) for _ in found]
        groups.append(TrajectoryGroup(trajectories, rewards, [{} for _ in found]))
        per_group.append(found)
    return groups, per_group
