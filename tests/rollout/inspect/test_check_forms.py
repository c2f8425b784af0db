"""``check`` in every form, from the command line: the hand-off files, health, versions, replay.

A real-vocabulary run (Qwen3, guess-number) is written as a verl batch file and as
Tinker and PyTRIO datum files; each reads back as the samples it was made from, and
``agentenvs check`` judges each alone and with its store. Run health is its own kind of
finding: a tool environment whose policy never calls a tool fails on health alone,
``--health warn`` downgrades it, and the verdict says which kind failed. Weights
proofs rewritten to ``lost`` fail, with ``--drift`` too; ``--replay`` refuses to regrade
under reward code that changed unless ``--against`` names the installed version, and an
environment that cannot replay says so.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from support.corruptions import collect_run, form_files, read_lines, write_forms, write_lines
from support.corruptions_upstream import stamp
from support.vocab import shared_vocabulary
from support.vocab.runs import collect_store
from typer.testing import CliRunner

from agentenvs.rollout.cli import app
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.data.training_data import samples_from_records
from agentenvs.rollout.inspect.check import check_file
from agentenvs.rollout.inspect.handoff_forms import file_kind, read_handoff
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.tokenizer import load_tokenizer
from agentenvs.rollout.weights.drift import DriftReport, VersionDrift
from agentenvs.rollout.weights.proof import Tolerance


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A Qwen3 guess-number run stamped as synced, verified weights, in every form, and the
    tokenizer saved as a directory the CLI loads."""
    folder = tmp_path_factory.mktemp("forms")
    tok = shared_vocabulary("qwen3")
    store = collect_run(tok, "chat", folder / "run.jsonl", bug=stamp(3, "verified"))
    tok.save_pretrained(folder / "tok")
    return tok, write_forms(store, folder, tok), folder


def _cli(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["check", *args, "--json"])
    last = result.output.strip().splitlines()[-1]
    return result.exit_code, json.loads(last[last.index("{") :])


def test_every_form_reads_back_as_the_samples_it_was_made_from(run):
    _tok, paths, _ = run
    samples, _ = samples_from_records(list(TrajectoryStore(paths["store"]).read()))
    want = {(s.group_index, s.traj_index, s.sample_index): s for s in samples}
    for form, kind in (("handoff", "samples"), ("verl", "verl"), ("tinker", "datums"), ("pytrio", "datums")):  # fmt: skip
        assert file_kind(paths[form]) == kind
        got = read_handoff(paths[form], kind).samples
        assert len(got) == len(want), form
        for s in got:
            w = want[s.group_index, s.traj_index, s.sample_index]
            assert (s.tokens, s.loss_mask, s.collected) == (w.tokens, w.loss_mask, w.collected), (
                form
            )
            assert all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(s.logprobs, w.logprobs, strict=True))  # fmt: skip
            assert math.isclose(s.reward, w.reward, rel_tol=1e-6) and s.prompt_length == w.prompt_length  # fmt: skip


@pytest.mark.parametrize("form", ["verl", "verl+store", "tinker+store", "pytrio"])
def test_cli_checks_a_hand_off_form_and_fails_a_shifted_one(run, form, tmp_path):
    _tok, paths, folder = run
    file, store = form_files(paths, form)
    args = [str(file), "--tokenizer", str(folder / "tok")] + (["--store", str(store)] if store else [])  # fmt: skip
    code, report = _cli(*args)
    assert code == 0 and report["verdict"] == "all checks passed", report["findings"]
    assert report["stats"]["form"] == form.split("+")[0].replace("tinker", "datums").replace("pytrio", "datums")  # fmt: skip
    if file.suffix == ".jsonl":  # a datum file: shift one line's targets back onto its inputs
        lines = read_lines(file)
        lines[2]["loss_fn_inputs"]["target_tokens"] = lines[2]["model_input"]
        bad = write_lines(lines, tmp_path / "bad.jsonl")
    else:  # a verl batch: one row's reward on its first response column
        from agentenvs.rollout.trainers.verl.handoff import load_verl_batch, save_verl_batch

        batch = load_verl_batch(file)
        scores = batch.tensors["rm_scores"]
        scores[2, 0], scores[2, scores[2].nonzero()[0][-1]] = scores[2].sum(), 0.0
        bad = save_verl_batch(batch.tensors, tmp_path / "bad.safetensors", extra=batch.extra)
    code, report = _cli(str(bad), *args[1:])
    assert code == 1 and report["failed_kinds"].keys() == {"integrity"}, report["findings"]
    assert report["verdict"].startswith("checks failed: data integrity (")


def test_a_tool_env_that_never_calls_a_tool_fails_on_health_alone(tmp_path):
    """search_r1 under a policy that never writes the protocol's tags: the data is sound,
    the run is not worth training on; --health warn says so without failing."""
    tok = load_tokenizer("builtin")
    policy = make_policy("scripted", variant="malformed")
    store = collect_store(tok, "search_r1", tmp_path / "run.jsonl", policy=policy, groups=1)
    report = check_file(store, tokenizer=tok)
    assert report.failed_kinds() == {"health": 1}
    (failed,) = [f for f in report.findings if f.status == "fail"]
    assert failed.kind == "health" and "no tool call attempted" in failed.detail
    code, payload = _cli(str(store), "--tokenizer", "builtin")
    assert code == 1 and payload["verdict"] == "checks failed: run health (1)"
    code, payload = _cli(str(store), "--tokenizer", "builtin", "--health", "warn")
    assert code == 0 and payload["verdict"] == "all checks passed"
    warned = [f for f in payload["findings"] if "downgraded" in f["detail"]]
    assert warned and warned[0]["kind"] == "health" and warned[0]["status"] == "warn"


def test_verified_turns_rewritten_to_lost_fail_also_with_a_clean_drift_log(run, tmp_path):
    tok, paths, folder = run
    clean = check_file(paths["store"], tokenizer=tok, current_version=3)
    proofs = [f for f in clean.findings if f.detail.startswith("weights proofs")]
    assert clean.ok and re.fullmatch(
        r"weights proofs of the run's turns: verified \d+", proofs[0].detail
    )
    lines = read_lines(paths["store"])
    for line in lines:
        for traj in line["trajectories"]:
            for tr in traj["transitions"]:
                tr["logs"]["policy/weights_proof"] = "lost"
    bad = write_lines(lines, tmp_path / "lost.jsonl")
    tolerance = Tolerance.for_dtype("float32")
    keys = tuple(line["key"] for line in lines)
    quiet = VersionDrift(3, 100, 0.001, 0.001, 0.002, 0.0, on_policy=True, keys=keys)
    drift = [DriftReport(step=1, trainer_version=3, versions=(quiet,), tolerance=tolerance)]
    for report in (check_file(bad, tokenizer=tok), check_file(bad, tokenizer=tok, drift=drift)):
        failed = [f for f in report.findings if f.status == "fail"]
        assert [f.where for f in failed] == [f"group {keys[0]} traj 0 turn 0"], failed
        assert "weights proof 'lost'" in failed[0].detail
    assert check_file(bad, tokenizer=tok, require_verified=False).ok
    drift_path = tmp_path / "drift.jsonl"
    drift_path.write_text(json.dumps(drift[0].to_json()) + "\n")
    code, _ = _cli(str(bad), "--tokenizer", str(folder / "tok"), "--drift", str(drift_path))
    assert code == 1
    code, _ = _cli(str(bad), "--tokenizer", str(folder / "tok"), "--no-require-verified")
    assert code == 0


def test_replay_refuses_to_regrade_under_changed_reward_code_unless_named(run, tmp_path):
    _tok, paths, folder = run
    lines = read_lines(paths["store"])
    for line in lines:
        (component,) = line["provenance"]["reward"]["components"]
        component["code_sha256"] = "0" * 16  # the code the run names is not the installed code
    changed = write_lines(lines, tmp_path / "changed.jsonl")
    tok_dir = str(folder / "tok")
    code, payload = _cli(str(changed), "--tokenizer", tok_dir, "--replay")
    failed = [f for f in payload["findings"] if f["status"] == "fail"]
    assert code == 1 and [f["detail"][:17] for f in failed] == ["regrade refused: "], failed
    assert "code_sha256: 0000000000000000 ->" in failed[0]["detail"]
    code, payload = _cli(str(changed), "--tokenizer", tok_dir, "--replay", "--against", "guess@1")
    assert code == 0, [f for f in payload["findings"] if f["status"] == "fail"]
    assert any(f["detail"].startswith("regrade: ") for f in payload["findings"])
    code, _ = _cli(str(changed), "--tokenizer", tok_dir, "--replay", "--against", "guess@2")
    assert code == 1  # not the installed version


def test_an_environment_that_cannot_replay_says_so(run, tmp_path):
    tok, paths, _ = run
    lines = read_lines(paths["store"])
    for line in lines:
        line["env"] = line["run"]["env"] = "reverse_word"  # registered nowhere here
    report = check_file(write_lines(lines, tmp_path / "other.jsonl"), tokenizer=tok, replay=True)
    (said,) = [f for f in report.findings if f.detail.startswith("replay:")]
    assert said.status == "skip" and "3 groups of reverse_word not replayed" in said.detail
    assert "is not installed here" in said.detail


def test_the_cli_loads_the_tokenizer_directory_without_transformers(run):
    """The check's tokenizer is served from the directory's serialized fast tokenizer;
    its fingerprint is the one the run recorded (so replay accepts it)."""
    import subprocess
    import sys

    _, _, folder = run
    code = (
        "import sys; from agentenvs.rollout.inspect.vocab import load_check_tokenizer;"
        "from agentenvs.envs.tokenizer_fingerprint import tokenizer_fingerprint;"
        f"t = load_check_tokenizer({str(folder / 'tok')!r});"
        "print(tokenizer_fingerprint(t)['vocab_sha256'], 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    vocab, imported = out.stdout.split()
    recorded = read_lines(folder / "run.jsonl")[0]["provenance"]["tokenizer"]["vocab_sha256"]
    assert (vocab, imported) == (recorded, "False")
