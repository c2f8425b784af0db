"""The corruption suite (issues 31, 45): every kind of spoiled run is caught and named, on the
real Qwen2.5, Qwen3 and DeepSeek-V3 vocabularies, and every clean run passes in every form.

Runs are collected once per vocabulary (``support/corruption_runs.py`` says which and
how every hand-off form is written). A stored-file corruption (``support/corruptions.py``)
is checked in each form it is listed for: the store, its hand-off alone (with the
tokenizer), the hand-off with ``--store``. A bug upstream of the record
(``support/corruptions_upstream.py``) makes its own run and is checked in every form it
fits: the store, the JSONL hand-off, a verl batch file, Tinker and PyTRIO datum files,
each alone and with the store. The finding must fail the report and name the group,
trajectory, sample or turn (and token) the mutation touched.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.corruptions import (
    CORRUPTIONS,
    FORMS,
    RUNS,
    UPSTREAM,
    Corruption,
    Upstream,
    collect_run,
    form_files,
    read_lines,
    write_forms,
    write_lines,
)
from support.vocab import shared_vocabulary

from agentenvs.rollout.inspect.check import Check, CheckReport, Finding, check_file

VOCABS = ["qwen2.5", "qwen3", "deepseek-v3"]
CURRENT = {"current_version": 3, "max_staleness": 0}
"""The runs are stamped with weights version 3 and the trainer is still at it."""
REPLAYED_FORMS = ("store",)
"""Clean runs are replayed in the store (a hand-off's store replays the same; the bugs
upstream of the record show that its findings reach every "+store" form)."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(vocab, run) -> every form of the clean run, collected on first use, once per module."""
    made: dict[tuple[str, str], dict[str, Path]] = {}

    def get(vocab: str, run: str) -> dict[str, Path]:
        if (vocab, run) not in made:
            folder = tmp_path_factory.mktemp(f"{vocab}-{run}")
            tok = shared_vocabulary(vocab)
            made[vocab, run] = write_forms(collect_run(tok, run, folder / "run.jsonl"), folder, tok)
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
    paths = runs(vocab, run)
    for form in FORMS:
        file, reference = form_files(paths, form)
        report = check_file(
            file, tokenizer=tok, reference=reference, replay=form in REPLAYED_FORMS, **CURRENT
        )
        assert report.ok, (form, _failures(report))
        if form == "store":
            recorded = [f for f in report.findings if "collector recorded" in f.detail]
            assert recorded, "the clean store's collection record was compared"
            replayed = [f for f in report.findings if f.detail.startswith("replay: ")]
            assert [f.status for f in replayed] == ["pass"], replayed
    # A store written before collection fingerprints still checks, and says so.
    lines = read_lines(paths["store"])
    for line in lines:
        line.pop("collected")
    old = check_file(write_lines(lines, tmp_path / "old.jsonl"), tokenizer=tok)
    assert old.ok, _failures(old)
    assert any(f.status == "skip" and "not recorded" in f.detail for f in old.findings)


@pytest.mark.parametrize(("vocab", "run", "corruption", "form"), list(_cases()))
def test_corruption_is_caught_and_named(vocab, run, corruption: Corruption, form, runs, tmp_path):
    tok = shared_vocabulary(vocab)
    paths = runs(vocab, run)
    source = paths["store"] if corruption.target == "store" else paths["handoff"]
    lines = read_lines(source)
    where = corruption.edit(lines, tok)
    bad = write_lines(lines, tmp_path / f"bad-{source.name}")
    if corruption.unreadable:
        with pytest.raises(ValueError, match=f"{where}\\b"):
            check_file(bad, tokenizer=tok)
        return
    reference = paths["store"] if form == "handoff+store" else None
    report = check_file(bad, tokenizer=tok, reference=reference)
    failed = _failures(report)
    assert failed, f"{corruption.name} not caught: {report.findings}"
    assert any(_names(f, where) for f in failed), (where, failed)


def _upstream_cases():
    for upstream in UPSTREAM:
        for vocab in upstream.vocabs:
            yield pytest.param(vocab, upstream, id=f"{vocab}-{upstream.run}-{upstream.name}")


@pytest.mark.parametrize(("vocab", "upstream"), list(_upstream_cases()))
def test_bug_upstream_of_the_record_is_caught_in_every_form_it_fits(
    vocab, upstream: Upstream, tmp_path
):
    """The buggy component writes a self-consistent store (and its hand-offs); each form
    it fits fails, naming the place the bug struck."""
    tok = shared_vocabulary(vocab)
    store = upstream.make(tok, upstream.run, tmp_path / "run.jsonl")
    paths = write_forms(store, tmp_path, tok, upstream.writers)
    places = upstream.where(read_lines(store), tok)
    for form in upstream.forms:
        file, reference = form_files(paths, form)
        report = check_file(file, tokenizer=tok, reference=reference, **upstream.settings)
        failed = _failures(report)
        assert failed, f"{upstream.name} not caught in {form}: {report.findings}"
        named = [f for f in failed if f.where.removeprefix("first: ").startswith(tuple(places))]
        assert named, (form, places, failed)


# ---- the smaller kinds of item 7 that warn or refuse rather than name a token ----------


def test_a_group_without_weights_version_fails_under_a_staleness_bound(runs, tmp_path):
    tok = shared_vocabulary("qwen3")
    store = runs("qwen3", "chat")["store"]
    lines = read_lines(store)
    del lines[1]["provenance"]["policy"]["weights_version"]
    bad = write_lines(lines, tmp_path / "unversioned.jsonl")
    bounded = check_file(bad, tokenizer=tok, current_version=3, max_staleness=1)
    failed = [f for f in bounded.by_check(Check.COMPLETION_BOUNDARIES) if f.status == "fail"]
    assert failed and failed[0].where == f"first: group {lines[1]['key']} traj 0", failed
    unbounded = check_file(bad, tokenizer=tok, current_version=3)
    assert unbounded.ok and unbounded.status(Check.COMPLETION_BOUNDARIES) == "warn"


def test_a_missing_action_text_is_counted_and_named(runs, tmp_path):
    tok = shared_vocabulary("qwen2.5")
    store = runs("qwen2.5", "chat")["store"]
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
    handoff = runs("deepseek-v3", "chat")["handoff"]
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
    store, handoff = runs("qwen3", "nologprobs")["store"], runs("qwen3", "nologprobs")["handoff"]
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
