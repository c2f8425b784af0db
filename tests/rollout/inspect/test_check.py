"""`agentenvs check` on clean data from the real collector, and on hand-corrupted copies.

Each corruption below is one of the mistakes the checks exist for; each must be
caught by the check named for it, and the clean file must pass every check. They
run on the builtin tokenizer and on two real vocabularies (tests/vocab/), where
byte-level tokens, control tokens and text round trips behave as in real runs.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support.corruption_runs import MixedPolicy
from support.paths import REPO
from support.tree_helpers import SeededGuesser
from support.vocab import shared_vocabulary

from agentenvs.envs import make
from agentenvs.rollout.collect.collector import CollectOptions, ProvenanceNotes, collect
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.collect.tree import BranchSchedule, do_tree_rollout
from agentenvs.rollout.data.advantages import compute_advantages, estimator_info
from agentenvs.rollout.data.samples import trajectories_to_samples
from agentenvs.rollout.data.tree_advantages import tree_estimator_info, tree_samples
from agentenvs.rollout.inspect.check import CHECKS, Check, check_file
from agentenvs.rollout.tokenizer import train_chatml_tokenizer
from agentenvs.rollout.trainers.jsonl.handoff import write_samples_jsonl


def _collect(tokenizer, path: Path, *, groups: int = 4, weights_version: int = 3) -> None:
    config = make("guess_number", tasks=groups)
    dataset = config.dataset(tokenizer, group_size=3)
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    policy = MixedPolicy()  # made-up logprobs, rewards that vary in a group
    policy.weights_version = weights_version  # a VersionedPolicy: in every record's provenance
    asyncio.run(
        collect(
            builders,
            policy,
            CollectOptions(concurrency=2, progress=False),
            store=TrajectoryStore(path),
            notes=ProvenanceNotes(policy_name="scripted"),
        )
    )


@pytest.fixture(scope="module", params=["builtin", "qwen3", "deepseek-v3"])
def tokenizer(request):
    """Overrides the suite's builtin tokenizer here: every check on every vocabulary."""
    if request.param == "builtin":
        return train_chatml_tokenizer()
    return shared_vocabulary(request.param)


@pytest.fixture
def clean_store(tokenizer, tmp_path) -> Path:
    path = tmp_path / "run.jsonl"
    _collect(tokenizer, path)
    return path


def _rewrite(path: Path, out: Path, edit) -> Path:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    edit(lines)
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return out


def test_check_names_are_the_documented_ones_and_write_as_plain_strings():
    lines = (REPO / "docs/check.md").read_text().splitlines()
    rows = [line.split("|")[1].strip() for line in lines if line.startswith("|")]
    documented = [row for row in rows if row in {c.value for c in Check}]
    assert documented == [c.value for c in CHECKS] == list(CHECKS)
    assert json.dumps({Check.RE_RENDERING: Check.FIXED_INPUT}) == '{"re_rendering": "fixed_input"}'


def test_clean_store_passes_every_check(tokenizer, clean_store):
    report = check_file(clean_store, tokenizer=tokenizer, current_version=3, max_staleness=0)
    assert report.ok, [f for f in report.findings if f.status == "fail"]
    for name in (Check.FIXED_INPUT, Check.FIXED_TRAJECTORY, Check.LOSS_INPUTS, Check.RE_RENDERING):
        assert report.status(name) == "pass", (name, report.by_check(name))
    assert report.stats["samples"] == 4 * 3


def test_changed_tokenizer_template_is_flagged(tokenizer, clean_store, tmp_path):
    def edit(lines):
        lines[2]["provenance"]["tokenizer"]["chat_template_sha256"] = "0" * 16

    report = check_file(_rewrite(clean_store, tmp_path / "bad.jsonl", edit), tokenizer=tokenizer)
    failed = [f for f in report.by_check(Check.FIXED_INPUT) if f.status == "fail"]
    assert failed and "chat_template_sha256" in failed[0].detail
    assert lines_key(clean_store, 2) in failed[0].where
    assert not report.ok


def lines_key(path: Path, index: int) -> str:
    return json.loads(path.read_text().splitlines()[index])["key"]


def test_retokenized_action_is_caught(tokenizer, clean_store, tmp_path):
    """A pipeline that re-encodes an action character by character: same text, other tokens."""

    def edit(lines):
        tr = lines[0]["trajectories"][1]["transitions"][0]
        text = tokenizer.decode(tr["ac"])
        tr["ac"] = [t for ch in text for t in tokenizer.encode(ch, add_special_tokens=False)]

    report = check_file(_rewrite(clean_store, tmp_path / "bad.jsonl", edit), tokenizer=tokenizer)
    failed = [f for f in report.by_check(Check.FIXED_TRAJECTORY) if f.status == "fail"]
    assert failed, report.findings
    assert "traj 1" in failed[0].where and "turn 0" in failed[0].where


@pytest.mark.parametrize("value", [0.7, float("nan"), float("-inf")])
def test_a_logprob_that_is_no_log_probability_is_caught(value, tokenizer, clean_store, tmp_path):
    """Lengths intact, one value corrupt: a NaN poisons the loss, +0.7 is no probability."""

    def edit(lines):
        lines[1]["trajectories"][2]["transitions"][0]["logprobs"][1] = value

    report = check_file(_rewrite(clean_store, tmp_path / "bad.jsonl", edit), tokenizer=tokenizer)
    failed = [f for f in report.by_check(Check.FIXED_TRAJECTORY) if f.status == "fail"]
    assert failed and "logprob" in failed[0].detail, report.findings
    assert failed[0].where == f"group {lines_key(clean_store, 1)} traj 2 turn 0 token 1"
    assert not report.ok


def test_shifted_logprobs_in_a_handoff_are_caught(tokenizer, clean_store, tmp_path):
    clean = _samples_file(clean_store, tmp_path / "samples.jsonl")
    assert check_file(clean).ok

    def edit(lines):
        lp = lines[0]["logprobs"]
        lines[0]["logprobs"] = [*lp[1:], 0.0]  # off by one towards the prompt

    report = check_file(_rewrite(clean, tmp_path / "shifted.jsonl", edit))
    failed = [f for f in report.by_check(Check.FIXED_TRAJECTORY) if f.status == "fail"]
    assert failed and "outside the loss mask" in failed[0].detail
    assert "token" in failed[0].where


def _samples_file(clean_store: Path, path: Path) -> Path:
    records = list(TrajectoryStore(clean_store).read())
    groups = [r.group for r in records]
    samples = trajectories_to_samples(groups, compute_advantages(groups, "grpo"))
    write_samples_jsonl(samples, path, extra={"advantage_estimator": estimator_info("grpo")})
    return path


@pytest.mark.parametrize("where", ["prompt", "observation"])
def test_mask_over_an_environment_token_is_caught(tokenizer, clean_store, tmp_path, where):
    path = _samples_file(clean_store, tmp_path / "samples.jsonl")

    def edit(lines):
        line = next(ln for ln in lines if ln["loss_mask"].count(0) > ln["prompt_length"])
        if where == "prompt":
            pos = line["prompt_length"] - 1
        else:  # the first environment token after the first action
            first = line["prompt_length"]
            pos = next(i for i in range(first, len(line["tokens"])) if line["loss_mask"][i] == 0)
        line["loss_mask"][pos] = 1
        line["advantages"][pos] = line["advantage"]

    masked = _rewrite(path, tmp_path / "masked.jsonl", edit)
    report = check_file(masked)
    failed = [f for f in report.by_check(Check.FIXED_TRAJECTORY) if f.status == "fail"]
    if where == "prompt":
        assert failed and "prompt token" in failed[0].detail, report.findings
    else:
        # A logprob of 0.0 is what engines report for a token of probability ~1, so a
        # samples file alone cannot tell; it says so, and the store decides.
        assert not failed, failed
        warned = [f for f in report.by_check(Check.FIXED_TRAJECTORY) if f.status == "warn"]
        assert warned and "0.0" in warned[0].detail
    against = check_file(masked, reference=clean_store)
    failed = [f for f in against.by_check(Check.FIXED_TRAJECTORY) if f.status == "fail"]
    assert failed, against.findings
    assert "token" in failed[0].where
    if where == "observation":
        assert "environment token" in failed[0].detail
    assert check_file(path, reference=clean_store).ok


def test_advantages_not_matching_the_estimator_are_caught(tokenizer, clean_store, tmp_path):
    def edit(lines):
        for line in lines:
            # The store holds GRPO (std-normalised, the default); labelled as centred only:
            line["extra"]["advantage_estimator"] = estimator_info("grpo", normalize_std=False)

    report = check_file(_rewrite(clean_store, tmp_path / "bad.jsonl", edit), tokenizer=tokenizer)
    # Rewards differ within groups (the oracle needs a varying number of guesses), so
    # std normalisation changes the numbers; a constant group would hide it.
    assert any(
        f.status == "fail" and "but grpo of the rewards" in f.detail
        for f in report.by_check(Check.LOSS_INPUTS)
    ), report.by_check(Check.LOSS_INPUTS)


def _segment_samples_file(tokenizer, path: Path) -> Path:
    """tree_segment samples of a real tree rollout, rewards spread so segments differ."""
    config = make("guess_number", limits={"max_turns": 4})
    schedule = BranchSchedule(branch_at=(2, 3), branch_factor=2)
    group = asyncio.run(
        do_tree_rollout(config.group_builder(3, 1, tokenizer), SeededGuesser(tokenizer), schedule)
    )
    group.group_rewards = [float(i) for i in range(len(group.trajectories))]
    samples = tree_samples([group], [group.tree], "tree_segment")
    estimator = tree_estimator_info("tree_segment")
    write_samples_jsonl(samples, path, extra={"advantage_estimator": estimator})
    return path


def test_per_step_advantages_pass_and_a_broken_span_is_caught(tokenizer, tmp_path):
    path = _segment_samples_file(tokenizer, tmp_path / "segments.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    trained = [
        {a for a, m in zip(ln["advantages"], ln["loss_mask"], strict=True) if m} for ln in lines
    ]
    assert any(len(values) > 1 for values in trained)  # really per step, not one scalar
    report = check_file(path)
    assert report.status(Check.LOSS_INPUTS) != "fail", report.by_check(Check.LOSS_INPUTS)
    assert report.ok, [f for f in report.findings if f.status == "fail"]

    # Labelled as a scalar estimator, the same samples break the one-value rule.
    def relabel(rows):
        for row in rows:
            row["extra"]["advantage_estimator"] = estimator_info("grpo")

    scalar = check_file(_rewrite(path, tmp_path / "relabelled.jsonl", relabel))
    assert any(f.status == "fail" for f in scalar.by_check(Check.LOSS_INPUTS))

    # One token inside a sampled span gets another value: that token is named.
    spot: dict[str, str] = {}

    def second_token_of_a_span(row) -> int | None:
        mask = row["loss_mask"]
        return next((p for p in range(1, len(mask)) if mask[p - 1] == mask[p] == 1), None)

    def corrupt(rows):
        row = next(r for r in rows if second_token_of_a_span(r) is not None)
        pos = second_token_of_a_span(row)
        row["advantages"][pos] += 0.5
        spot["where"] = (
            f"group {row['group_index']} traj {row['traj_index']} "
            f"sample {row['sample_index']} token {pos}"
        )

    broken = check_file(_rewrite(path, tmp_path / "broken.jsonl", corrupt))
    failed = [f for f in broken.by_check(Check.LOSS_INPUTS) if f.status == "fail"]
    assert failed, broken.by_check(Check.LOSS_INPUTS)
    assert failed[0].where == spot["where"], failed[0]
    assert "sampled span" in failed[0].detail


def test_stale_weights_are_caught(tokenizer, clean_store):
    report = check_file(clean_store, tokenizer=tokenizer, current_version=7, max_staleness=2)
    failed = [f for f in report.by_check(Check.COMPLETION_BOUNDARIES) if f.status == "fail"]
    assert failed and "4 versions behind" in failed[0].detail
    passed = [f for f in report.by_check(Check.COMPLETION_BOUNDARIES) if f.status == "pass"]
    assert "4:" in passed[0].detail


def test_unrecorded_prefix_break_is_caught(tokenizer, clean_store, tmp_path):
    """A context rewritten mid-episode (a template that strips history) without the
    collector's record of it: the split points no longer match."""
    records = list(TrajectoryStore(clean_store).read())
    traj = records[1].group.trajectories[0]
    assert len(traj.transitions) >= 2
    traj.transitions[1].ob = traj.transitions[1].ob[5:]  # no longer extends turn 0
    bad = TrajectoryStore(tmp_path / "bad.jsonl")
    for record in records:
        bad.append(record)

    report = check_file(tmp_path / "bad.jsonl", tokenizer=tokenizer)
    failed = [f for f in report.by_check(Check.RE_RENDERING) if f.status == "fail"]
    assert failed and "prefix breaks" in failed[0].detail
    assert records[1].key in failed[0].where


def test_failed_groups_and_garbage_do_not_crash(tokenizer, tmp_path):
    path = tmp_path / "run.jsonl"
    record = GroupRecord(
        key="0:x",
        env="guess_number",
        task_id="x",
        group=None,
        status="failed",
        error="RuntimeError: boom",
    )
    TrajectoryStore(path).append(record)
    report = check_file(path, tokenizer=tokenizer)
    assert report.stats == {"groups": 1, "ok": 0, "failed": 1, "samples": 0}
    (tmp_path / "junk.jsonl").write_text('{"hello": 1}\n')
    with pytest.raises(ValueError, match="neither"):
        check_file(tmp_path / "junk.jsonl")


# ---- the CLI ---------------------------------------------------------------------------------


def _cli(*args: str):
    from typer.testing import CliRunner

    from agentenvs.rollout.cli import app

    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("env", ["guess_number", "search_r1", "retool", "alfworld"])
def test_clean_output_of_each_environment_passes(env, tmp_path):
    out = tmp_path / f"{env}.jsonl"
    result = _cli(
        "rollout", env, "--policy", "scripted", "--groups", "2", "--group-size", "2",
        "--out", str(out), "--json-summary", "--policy-opt", "weights_version=5",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    checked = _cli("check", str(out), "--json", "--current-version", "5", "--max-staleness", "0")
    assert checked.exit_code == 0, checked.output
    payload = json.loads(checked.output.strip().splitlines()[-1])
    assert payload["ok"] and payload["stats"]["samples"] == 4
    statuses: dict[str, set[str]] = {}
    for finding in payload["findings"]:
        if finding["status"] != "warn":
            statuses.setdefault(finding["check"], set()).add(finding["status"])
    # The oracle's calls parse; ALFWorld's observations are not tool results, so the
    # masking half of the tool audit has nothing to look for there.
    tools = {
        "guess_number": {},
        "alfworld": {"tool_calls": {"pass", "skip"}},
    }.get(env, {"tool_calls": {"pass"}})
    assert statuses == {
        "fixed_input": {"pass"},
        "fixed_trajectory": {"pass"},
        "loss_inputs": {"pass"},
        "completion_boundaries": {"pass"},
        "re_rendering": {"pass"},
        "rewards": {"pass"},
        **tools,
    }


def test_cli_check_exits_nonzero_and_names_the_offender(tmp_path):
    clean_store = tmp_path / "run.jsonl"
    _collect(train_chatml_tokenizer(), clean_store)  # the store of the tokenizer named below
    bad = _rewrite(
        clean_store,
        tmp_path / "bad.jsonl",
        lambda lines: lines[1]["provenance"]["tokenizer"].update(vocab_sha256="f" * 16),
    )
    result = _cli("check", str(bad), "--tokenizer", "builtin")
    assert result.exit_code == 1
    assert "vocab_sha256" in result.output and "checks failed" in result.output


def test_cli_check_bad_input_is_one_line(tmp_path):
    missing = _cli("check", str(tmp_path / "nope.jsonl"))
    assert missing.exit_code == 2 and "no such file" in missing.output
    (tmp_path / "junk.jsonl").write_text("not json\n")
    junk = _cli("check", str(tmp_path / "junk.jsonl"))
    assert junk.exit_code == 2 and "Traceback" not in junk.output


def test_cli_check_template(tmp_path):
    result = _cli("check-template", "builtin", "--strict")
    assert result.exit_code == 0, result.output
    assert "extends every turn" in result.output
    bad = _cli("check-template", str(tmp_path / "no-such-tokenizer"))
    assert bad.exit_code == 2 and "no such directory" in bad.output


# ---- from the store to a trainer: provenance per sample, stale weights refused -------------


def test_samples_from_records_carry_provenance_and_refuse_stale(clean_store):
    from agentenvs.rollout.data.training_data import (
        StaleSamplesError,
        samples_from_records,
        split_by_staleness,
    )

    records = list(TrajectoryStore(clean_store).read())
    samples, metadata = samples_from_records(records, current_version=4, max_staleness=1)
    assert len(samples) == len(metadata) == 12
    assert {m["weights_version"] for m in metadata} == {3}
    assert all(m["advantage_estimator"]["estimator"] == "grpo" for m in metadata)
    stored = {r.key: r.extra["advantages"] for r in records}
    for sample, meta in zip(samples, metadata, strict=True):
        assert sample.advantage == pytest.approx(stored[meta["key"]][sample.traj_index])
        assert meta["provenance"]["tokenizer"]["vocab_sha256"]

    with pytest.raises(StaleSamplesError, match="weights version 3"):
        samples_from_records(records, current_version=6, max_staleness=2)
    split = split_by_staleness(records, current_version=6, max_staleness=3)
    assert len(split.kept) == 4 and not split.stale

    rloo, _ = samples_from_records(records, estimator="rloo")
    assert any(a.advantage != b.advantage for a, b in zip(rloo, samples, strict=True))
