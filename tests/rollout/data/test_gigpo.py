"""GiGPO's per-step advantages: hand-computed cases, verl-agent's own outputs, and an
independent float32 port of verl-agent's row arithmetic over random groups.

``verl_agent_gigpo_reference.json`` holds what langfengQ/verl-agent's
``gigpo/core_gigpo.py`` (d0b9724; md5 in the file) returned when run, with verl 0.9.1,
on the inputs stored beside each result: ``compute_step_discounted_returns``, then the
trainer's ``apply_invalid_action_penalty`` (coefficient 0.1), then
``compute_gigpo_outcome_advantage``. Their code is not part of this repository, so it
cannot run here; :func:`verl_agent_rows` is our own port of its arithmetic (rows are
steps, float32 torch, sample std), checked against those recorded outputs first and
then used as the oracle on inputs hypothesis makes up.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.data.advantages import compute_advantages
from agentenvs.rollout.data.gigpo import GigpoSettings, discounted_returns, gigpo_advantages
from agentenvs.rollout.data.samples import trajectories_to_samples
from agentenvs.rollout.trainers.tinker.handoff import assemble_tinker_data
from agentenvs.rollout.trainers.verl.handoff import to_verl_batch

REFERENCE = json.loads((Path(__file__).parent / "verl_agent_gigpo_reference.json").read_text())
PENALTY = 0.1


def build(steps_per_traj, *, group_rewards=None, penalty=PENALTY) -> TrajectoryGroup:
    """Each step ``[env_reward, anchor, invalid]``; the env pays the penalty as a step
    reward, the way our ALFWorld env does (``invalid_format`` marks the step)."""
    trajectories = []
    token = 100
    for traj in steps_per_traj:
        transitions = []
        for reward, anchor, invalid in traj:
            token += 2
            transitions.append(
                Transition(
                    [token],
                    TokensWithLogprobs([token + 1, token + 1], [-0.5, -0.5]),
                    reward - penalty * invalid,
                    False,
                    metrics={"invalid_format": invalid},
                    logs={"anchor_key": anchor},
                )
            )
        transitions[-1].episode_done = True
        trajectories.append(Trajectory(transitions))
    rewards = group_rewards or [0.0] * len(trajectories)
    return TrajectoryGroup(trajectories, rewards, [{} for _ in trajectories])


def verl_agent_settings(mode: str, w: float, gamma: float) -> GigpoSettings:
    return GigpoSettings(
        gamma=gamma,
        step_advantage_w=w,
        normalize_std=mode == "mean_std_norm",
        penalty_metric="invalid_format",
        penalty=PENALTY,
    )


def verl_agent_rows(
    groups, mode: str, w: float, gamma: float, eps: float = 1e-6, dtype=torch.float32
) -> list[float]:
    """Our port of verl-agent's arithmetic: one row per step, stats per key; float32 as
    verl-agent computes, or float64 (see test_agrees_with_the_verl_agent_port)."""
    rows = []
    for g, group in enumerate(groups):
        for traj in group:
            episode = sum(step[0] for step in traj)
            running, returns = 0.0, []
            for reward, _anchor, _invalid in reversed(traj):
                running = reward + gamma * running
                returns.append(running)
            for (_reward, anchor, invalid), ret in zip(traj, reversed(returns), strict=True):
                rows.append((g, anchor, episode - PENALTY * invalid, ret - PENALTY * invalid))
    episode = torch.tensor([r[2] for r in rows], dtype=dtype)
    step = torch.tensor([r[3] for r in rows], dtype=dtype)

    def normalise(values, keys):
        out = values.clone()
        for key in set(keys):
            idx = torch.tensor([k == key for k in keys])
            chosen = values[idx]
            mean = chosen.mean()
            std = chosen.std() if len(chosen) > 1 else torch.tensor(1.0, dtype=dtype)
            out[idx] = (chosen - mean) / (std + eps) if mode == "mean_std_norm" else chosen - mean
        return out

    combined = normalise(episode, [r[0] for r in rows]) + w * normalise(
        step, [(r[0], r[1]) for r in rows]
    )
    return combined.tolist()


def flat(per_group):
    return [a for group in per_group for traj in group for a in traj]


HAND = [[[0.0, "a", 0], [10.0, "b", 0]], [[0.0, "a", 0], [0.0, "c", 0], [0.0, "b", 0]]]


def test_hand_computed_mean_std_norm():
    # Step rows' episode scores 10, 10 | 0, 0, 0: mean 4, centred 6, 6, -4, -4, -4, sample
    # std sqrt((2*36 + 3*16) / 4) = sqrt(30). Returns (gamma 0.95): A 9.5, 10 | B 0, 0, 0.
    # Step groups: a = {A0 9.5, B0 0} -> +-1/sqrt(2); b = {A1 10, B2 0} -> +-1/sqrt(2); c = {B1}: 0.
    e_win, e_loss, s = 6 / math.sqrt(30), -4 / math.sqrt(30), 1 / math.sqrt(2)
    got = gigpo_advantages(build(HAND))
    want = [[e_win + s, e_win + s], [e_loss - s, e_loss, e_loss - s]]
    for mine, theirs in zip(got, want, strict=True):
        assert mine == pytest.approx(theirs, rel=1e-5)


def test_hand_computed_mean_norm_and_the_weight():
    got = gigpo_advantages(build(HAND), GigpoSettings(normalize_std=False, step_advantage_w=0.5))
    # Episode 6 | -4; steps a: +-4.75, b: +-5, c: 0; combined with w = 0.5.
    assert got == [
        pytest.approx([6 + 0.5 * 4.75, 6 + 0.5 * 5]),
        pytest.approx([-4 - 0.5 * 4.75, -4.0, -4 - 0.5 * 5]),
    ]


def test_paper_episode_level_counts_each_trajectory_once():
    got = gigpo_advantages(build(HAND), GigpoSettings(episode_stats="trajectories"))
    # Totals 10 and 0: mean 5, sample std sqrt(50): +-1/sqrt(2) whatever the lengths.
    e, s = 5 / math.sqrt(50), 1 / math.sqrt(2)
    assert got[0] == pytest.approx([e + s, e + s], rel=1e-5)
    assert got[1] == pytest.approx([-e - s, -e, -e - s], rel=1e-5)


def test_discounted_returns():
    assert discounted_returns([0.0, 0.0, 10.0], 0.5) == [2.5, 5.0, 10.0]
    assert discounted_returns([1.0, 1.0], 1.0) == [2.0, 1.0]


def test_the_penalty_is_moved_onto_the_step_it_was_paid_at():
    # A's first step was format-invalid. verl-agent: the penalty comes off that row's episode
    # score and return only; summed and discounted as a plain reward it would also lower A1.
    group = build([[[0.0, "a", 1], [10.0, "b", 0]], [[0.0, "a", 0], [0.0, "b", 0]]])
    split = gigpo_advantages(group, verl_agent_settings("mean_norm", 1.0, 0.95))
    # Rows' episode scores 9.9, 10, 0, 0: mean 4.975. Returns A 9.5 - 0.1 = 9.4, 10; B 0, 0.
    assert split[0] == pytest.approx([9.9 - 4.975 + 4.7, 10 - 4.975 + 5.0])
    plain = gigpo_advantages(group, GigpoSettings(normalize_std=False))
    # As a plain reward: R_A = 9.9 on both rows, return of A0 = -0.1 + 0.95 * 10 = 9.4.
    assert plain[0] == pytest.approx([9.9 - 4.95 + 4.7, 9.9 - 4.95 + 5.0])


@pytest.mark.parametrize("case", REFERENCE["cases"], ids=lambda c: c["name"])
def test_matches_verl_agent_recorded_outputs(case):
    groups = [build(group) for group in case["groups"]]
    settings_ = verl_agent_settings(case["mode"], case["w"], case["gamma"])
    ours = flat(compute_advantages(groups, "gigpo", gigpo=settings_))
    assert ours == pytest.approx(case["advantages"], rel=1e-4, abs=1e-4)
    # The port used below as an oracle reproduces verl-agent's outputs too.
    port = verl_agent_rows(case["groups"], case["mode"], case["w"], case["gamma"])
    assert port == pytest.approx(case["advantages"], rel=1e-5, abs=1e-5)


step = st.tuples(
    st.sampled_from([0.0, 0.0, 1.0, 10.0]), st.sampled_from("abcd"), st.integers(0, 1)
).map(list)
group = st.lists(st.lists(step, min_size=1, max_size=6), min_size=2, max_size=6)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(group, min_size=1, max_size=3),
    st.sampled_from(["mean_std_norm", "mean_norm"]),
    st.sampled_from([1.0, 0.5]),
    st.sampled_from([0.95, 1.0, 0.0]),
)
def test_agrees_with_the_verl_agent_port(groups, mode, w, gamma):
    """In float64: verl-agent's float32 leaves a rounding residue (~1e-7) in the mean of a
    group whose scores are all equal, and dividing it by std 0 + eps (1e-6) gives spurious
    advantages up to ~0.1 there (hypothesis found one); ours gives such a group 0."""
    built = [build(g) for g in groups]
    ours = flat(compute_advantages(built, "gigpo", gigpo=verl_agent_settings(mode, w, gamma)))
    port = verl_agent_rows(groups, mode, w, gamma, dtype=torch.float64)
    assert ours == pytest.approx(port, rel=1e-6, abs=1e-6)


def test_corrupted_inputs_are_caught_by_the_oracle():
    """The comparison is sharp enough: one anchor renamed, gamma off by 0.05 or the
    penalty left in the returns each show."""
    case = REFERENCE["cases"][0]
    renamed = json.loads(json.dumps(case["groups"]))
    renamed[0][1][1][1] = "b"  # B's second step now shares state b with A1 and B2
    ours = flat(compute_advantages([build(g) for g in renamed], "gigpo"))
    assert ours != pytest.approx(case["advantages"], rel=1e-4, abs=1e-4)
    case = REFERENCE["cases"][2]  # random groups, mean_std_norm, gamma 0.95 (the hand case's
    # two-member step groups normalise to +-1/sqrt(2) whatever gamma is)
    groups = [build(g) for g in case["groups"]]
    right = verl_agent_settings(case["mode"], case["w"], case["gamma"])
    assert flat(compute_advantages(groups, "gigpo", gigpo=right)) == pytest.approx(
        case["advantages"], rel=1e-4, abs=1e-4
    )
    for wrong in (replace(right, gamma=0.9), replace(right, penalty_metric=None, penalty=0.0)):
        assert flat(compute_advantages(groups, "gigpo", gigpo=wrong)) != pytest.approx(
            case["advantages"], rel=1e-4, abs=1e-4
        )


def test_differences_from_verl_agent_on_purpose():
    # A lone trajectory has no baseline: 0 (verl-agent's rows would compare its steps).
    lone = build([[[0.0, "a", 0], [10.0, "b", 1]]])
    assert gigpo_advantages(lone, verl_agent_settings("mean_norm", 1.0, 0.95)) == [[0.0, 0.0]]
    lone_rows = verl_agent_rows([[[[0.0, "a", 0], [10.0, "b", 1]]]], "mean_norm", 1.0, 0.95)
    assert lone_rows == pytest.approx([0.05, -0.05], rel=1e-5)  # its rows' scores 10 and 9.9
    # A step without an anchor is its own step group (verl-agent would pool them).
    anchorless = build([[[0.0, "", 0], [10.0, "a", 0]], [[0.0, "", 0], [0.0, "a", 0]]])
    got = gigpo_advantages(
        anchorless, GigpoSettings(normalize_std=False, episode_stats="trajectories")
    )
    assert got == [pytest.approx([5.0, 5.0 + 5.0]), pytest.approx([-5.0, -5.0 - 5.0])]


def test_a_group_without_anchor_states_is_refused():
    with pytest.raises(ValueError, match="needs each step's 'anchor_key'"):
        gigpo_advantages(build([[[1.0, "", 0]], [[0.0, "", 0]]]))


def test_settings_are_checked_and_recorded():
    with pytest.raises(ValueError, match="gamma"):
        GigpoSettings(gamma=1.5)
    with pytest.raises(ValueError, match="penalty_metric"):
        GigpoSettings(penalty=0.1)
    info = GigpoSettings().info()
    assert info["estimator"] == "gigpo" and info["gamma"] == 0.95 and info["normalize_std"]
    json.dumps(info)


def test_group_reward_is_the_outcome_paid_at_the_last_step():
    steps = [[[0.0, "a", 0], [0.0, "b", 0]], [[0.0, "a", 0], [0.0, "b", 0]]]
    paid = gigpo_advantages(
        build(steps, group_rewards=[1.0, 0.0]), GigpoSettings(normalize_std=False)
    )
    # Episode +-0.5 on every row; returns A 0.95, 1 | B 0, 0: step groups +-0.475, +-0.5.
    assert paid == [pytest.approx([0.975, 1.0]), pytest.approx([-0.975, -1.0])]


def extending(group: TrajectoryGroup) -> TrajectoryGroup:
    """The same steps as one growing conversation: each observation extends the last."""
    for traj in group.trajectories:
        context: list[int] = []
        for tr in traj.transitions:
            tr.ob = context + tr.ob
            context = tr.ob + tr.ac.tokens
    return group


@pytest.mark.parametrize("layout", ["window", "full"])
def test_each_step_advantage_reaches_its_own_tokens_in_every_hand_off(tokenizer, layout):
    group = build(HAND) if layout == "window" else extending(build(HAND))
    advantages = compute_advantages([group], "gigpo")
    samples = trajectories_to_samples([group], advantages)
    # window: a new sample per step (verl-agent's rows); full: one sample per trajectory.
    assert len(samples) == (5 if layout == "window" else 2)
    for traj_index, per_step in enumerate(advantages[0]):
        trained = [
            a
            for sample in samples
            if sample.traj_index == traj_index
            for a, m in zip(sample.advantages, sample.loss_mask, strict=True)
            if m
        ]
        # Two action tokens per step, in step order.
        assert trained == pytest.approx([v for v in per_step for _ in range(2)])
    for sample in samples:  # observations carry nothing
        assert all(
            a == 0 for a, m in zip(sample.advantages, sample.loss_mask, strict=True) if not m
        )
    batch = to_verl_batch(samples, tokenizer.pad_token_id or 0)
    last = len(samples) - 1
    row = batch["advantages"][last][batch["response_mask"][last].bool()].tolist()
    want = samples[last].advantages[samples[last].prompt_length :]
    assert row == pytest.approx(
        [
            a
            for a, m in zip(
                want, samples[last].loss_mask[samples[last].prompt_length :], strict=True
            )
            if m
        ],
        rel=1e-6,
    )
    datums, _ = assemble_tinker_data([group], advantages)
    assert datums[last].loss_fn_inputs["advantages"].tolist() == pytest.approx(
        samples[last].advantages[1:], rel=1e-6
    )


def test_check_judges_gigpo_samples_per_step(tmp_path):
    """One sample holding several steps (full history): under the gigpo label each step's
    span is constant (pass); under a scalar label the changing values fail."""
    from agentenvs.rollout.inspect.check import check_file
    from agentenvs.rollout.inspect.findings import Check
    from agentenvs.rollout.trainers.jsonl.handoff import write_samples_jsonl

    group = extending(build(HAND))
    samples = trajectories_to_samples([group], compute_advantages([group], "gigpo"))
    assert len(samples) == 2
    good, bad = tmp_path / "gigpo.jsonl", tmp_path / "scalar.jsonl"
    write_samples_jsonl(samples, good, extra={"advantage_estimator": GigpoSettings().info()})
    write_samples_jsonl(samples, bad, extra={"advantage_estimator": {"estimator": "tree_grpo"}})
    assert check_file(good).status(Check.LOSS_INPUTS) != "fail"
    failed = [f for f in check_file(bad).by_check(Check.LOSS_INPUTS) if f.status == "fail"]
    assert any("differs from the trajectory's" in f.detail for f in failed), failed
