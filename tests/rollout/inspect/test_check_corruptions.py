"""The corruption suite (issue 31): every kind of spoiled run is caught and named, on the
real Qwen2.5, Qwen3 and DeepSeek-V3 vocabularies, and every clean control passes.

Runs are collected once per vocabulary (``support/corruptions.py`` says which and how
each corruption is made). A corruption is checked in each form it is listed for: the
store, its hand-off alone (with the tokenizer), the hand-off with ``--store``. The
finding must fail the report and name the group, trajectory, sample and token (or turn)
the mutation touched.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.corruptions import (
    CORRUPTIONS,
    RUNS,
    Corruption,
    collect_run,
    read_lines,
    write_handoff,
    write_lines,
)
from support.vocab import shared_vocabulary

from agentenvs.rollout.inspect.check import Check, CheckReport, Finding, check_file

VOCABS = ["qwen2.5", "qwen3", "deepseek-v3"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(vocab, run) -> (store, hand-off), collected on first use, once per module."""
    made: dict[tuple[str, str], tuple[Path, Path]] = {}

    def get(vocab: str, run: str) -> tuple[Path, Path]:
        if (vocab, run) not in made:
            folder = tmp_path_factory.mktemp(f"{vocab}-{run}")
            store = collect_run(shared_vocabulary(vocab), run, folder / "run.jsonl")
            made[vocab, run] = (store, write_handoff(store, folder / "samples.jsonl"))
        return made[vocab, run]

    return get


def _names(finding: Finding, where: str) -> bool:
    """The finding names the place: exactly, or (for a digest comparison, which knows a
    span changed but not which token) the span holding the mutated token."""
    if where in finding.where:
        return True
    head, _, token = where.rpartition(" token ")
    if not head or finding.tokens is None or head not in finding.where:
        return False
    first, last = finding.tokens
    return first <= int(token) <= last


def _failures(report: CheckReport) -> list:
    return [f for f in report.findings if f.status == "fail"]


def _cases():
    for vocab in VOCABS:
        for corruption in CORRUPTIONS:
            for run in corruption.runs:
                for form in corruption.caught:
                    yield pytest.param(
                        vocab, run, corruption, form,
                        id=f"{vocab}-{run}-{corruption.target}-{corruption.name}-{form}",
                    )  # fmt: skip


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("run", sorted(RUNS))
def test_clean_runs_pass_in_every_form(vocab, run, runs, tmp_path):
    tok = shared_vocabulary(vocab)
    store, handoff = runs(vocab, run)
    reports = [
        check_file(store, tokenizer=tok, current_version=0, max_staleness=0),
        check_file(handoff, tokenizer=tok),
        check_file(handoff, tokenizer=tok, reference=store),
    ]
    for report in reports:
        assert report.ok, _failures(report)
    recorded = [f for f in reports[0].findings if "collector recorded" in f.detail]
    assert recorded, "the clean store's collection record was compared"
    # A store written before collection fingerprints still checks, and says so.
    lines = read_lines(store)
    for line in lines:
        line.pop("collected")
    old = check_file(write_lines(lines, tmp_path / "old.jsonl"), tokenizer=tok)
    assert old.ok, _failures(old)
    assert any(f.status == "skip" and "not recorded" in f.detail for f in old.findings)


@pytest.mark.parametrize(("vocab", "run", "corruption", "form"), list(_cases()))
def test_corruption_is_caught_and_named(vocab, run, corruption: Corruption, form, runs, tmp_path):
    tok = shared_vocabulary(vocab)
    store, handoff = runs(vocab, run)
    source = store if corruption.target == "store" else handoff
    lines = read_lines(source)
    where = corruption.edit(lines, tok)
    bad = write_lines(lines, tmp_path / f"bad-{source.name}")
    if corruption.unreadable:
        with pytest.raises(ValueError, match=f"{where}\\b"):
            check_file(bad, tokenizer=tok)
        return
    reference = store if form == "handoff+store" else None
    report = check_file(bad, tokenizer=tok, reference=reference)
    failed = _failures(report)
    assert failed, f"{corruption.name} not caught: {report.findings}"
    assert any(_names(f, where) for f in failed), (where, failed)


# ---- the smaller kinds of item 7 that warn or refuse rather than name a token ----------


def test_a_group_without_weights_version_fails_under_a_staleness_bound(runs, tmp_path):
    tok = shared_vocabulary("qwen3")
    store, _ = runs("qwen3", "chat")
    lines = read_lines(store)
    del lines[1]["provenance"]["policy"]["weights_version"]
    bad = write_lines(lines, tmp_path / "unversioned.jsonl")
    bounded = check_file(bad, tokenizer=tok, current_version=0, max_staleness=1)
    failed = [f for f in bounded.by_check(Check.COMPLETION_BOUNDARIES) if f.status == "fail"]
    assert failed and failed[0].where == f"first: group {lines[1]['key']} traj 0", failed
    unbounded = check_file(bad, tokenizer=tok, current_version=0)
    assert unbounded.ok and unbounded.status(Check.COMPLETION_BOUNDARIES) == "warn"


def test_a_missing_action_text_is_counted_and_named(runs, tmp_path):
    tok = shared_vocabulary("qwen2.5")
    store, _ = runs("qwen2.5", "chat")
    lines = read_lines(store)
    del lines[2]["trajectories"][1]["transitions"][0]["logs"]["action_text"]
    report = check_file(write_lines(lines, tmp_path / "no-text.jsonl"), tokenizer=tok)
    warned = [f for f in report.findings if f.status == "warn" and "action text" in f.detail]
    assert warned and "1 carry no action text" in warned[0].detail, report.findings
    assert warned[0].where == f"first: group {lines[2]['key']} traj 1 turn 0"


def test_cli_checks_a_handoff_with_the_tokenizer_it_is_given(runs, tmp_path):
    """``--tokenizer`` was silently ignored for samples files; now it adds the vocabulary
    checks (an id past the vocabulary, in a hand-off checked alone)."""
    import json

    from typer.testing import CliRunner

    from agentenvs.rollout.cli import app

    tok = shared_vocabulary("deepseek-v3")
    _, handoff = runs("deepseek-v3", "chat")
    lines = read_lines(handoff)
    for line in lines:
        line.pop("collected")  # alone, without a collection record: only the vocabulary sees it
    start = lines[2]["loss_mask"].index(1)
    lines[2]["tokens"][start] = len(tok) + 7
    bad = write_lines(lines, tmp_path / "bad.jsonl")
    tok.save_pretrained(tmp_path / "tok")
    runner = CliRunner()
    assert runner.invoke(app, ["check", str(bad), "--json"]).exit_code == 0
    result = runner.invoke(app, ["check", str(bad), "--json", "--tokenizer", str(tmp_path / "tok")])
    assert result.exit_code == 1, result.output
    payload = json.loads(result.output.strip().splitlines()[-1])
    failed = [f for f in payload["findings"] if f["status"] == "fail"]
    assert failed[0]["where"].endswith(
        f"traj {lines[2]['traj_index']} sample {lines[2]['sample_index']} token {start}"
    )


def test_a_claimed_logprob_flag_is_named_in_every_form(runs, tmp_path):
    """``has_logprobs`` set on a sample whose policy gave none (issue #30: the scripted
    policy has none): alone (against the collection record in each line) and against
    the store, also for a hand-off written without collection records."""
    from support.corruptions import handoff_logprobs_claimed

    tok = shared_vocabulary("qwen3")
    store, handoff = runs("qwen3", "nologprobs")
    lines = read_lines(handoff)
    handoff_logprobs_claimed(lines, tok)
    bad = write_lines(lines, tmp_path / "claimed.jsonl")
    for line in lines:
        line.pop("collected")
    bare = write_lines(lines, tmp_path / "claimed-bare.jsonl")
    for path, reference in ((bad, None), (bad, store), (bare, store)):
        failed = _failures(check_file(path, tokenizer=tok, reference=reference))
        assert any("has_logprobs is true but" in f.detail for f in failed), (path, failed)
    assert check_file(bare, tokenizer=tok).ok  # alone and unrecorded, nothing can tell
