"""`agentenvs eval`: a fixed, recorded panel and budget, greedy by default, resumable."""

from __future__ import annotations

import json

import pytest
from support.compare_runs import GUESS_SMALL, evaluate, invoke

from agentenvs.rollout.collect.store import read_records


def test_eval_records_its_panel_budget_and_sampling(tmp_path) -> None:
    out = tmp_path / "e.jsonl"
    summary = evaluate(out, "--tasks", "5", "--set", "limits.max_turns=8")
    assert summary["groups"] == 5 and summary["trajectories"] == 5  # group size 1 by default
    records = read_records(out)
    assert [r.task_id for r in records] == [f"test/{i}" for i in range(5)]
    section = records[0].provenance["eval"]
    assert section["split"] == "test" and section["tasks"] == 5 and section["of_split"] == 64
    assert section["budget"]["max_turns"] == 8 and section["group_size"] == 1
    assert section["deterministic"] is True and section["preset"] is None
    assert all(r.provenance["eval"] == section for r in records)
    assert summary["eval"] == section


def test_eval_resumes_and_refuses_another_run_in_its_file(tmp_path) -> None:
    out = tmp_path / "e.jsonl"
    evaluate(out, "--tasks", "3")
    again = evaluate(out, "--tasks", "5")  # the first three are kept, two more run
    assert (again["skipped"], again["groups"]) == (3, 2)
    assert [r.task_id for r in read_records(out)] == [f"test/{i}" for i in range(5)]
    changed = invoke("eval", "guess_number", "--out", out, "--tasks", "5", "--group-size", "2",
                     "--no-progress")  # fmt: skip
    assert changed.exit_code == 2
    assert "holds a different run" in changed.stderr and "group_size" in changed.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--tasks", "65"], "the test split of guess_number has 64 tasks"),
        (["--tasks", "0"], "--tasks must be at least 1"),
        (["--split", "tset"], "unknown split 'tset'"),
        (["--preset", "gigpo"], "unknown preset 'gigpo' for guess_number"),
        (["--group-size", "0"], "--group-size must be at least 1"),
    ],
)
def test_bad_eval_input_is_one_line(tmp_path, args, fragment) -> None:
    result = invoke("eval", "guess_number", "--out", tmp_path / "e.jsonl", *args)
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert not (tmp_path / "e.jsonl").exists()


def test_eval_has_no_training_only_knobs() -> None:
    text = invoke("eval", "--help").stdout
    for flag in ("--tree", "--new-run", "--executor"):
        assert flag not in text
    for flag in ("--split", "--tasks", "--preset", "--group-size"):
        assert flag in text


def test_a_local_model_is_greedy_and_its_weights_hashed(tmp_path, tokenizer) -> None:
    from agentenvs.envs.weights_identity import hash_weights
    from agentenvs.rollout.policies.tiny_model import save_tiny_model

    model = save_tiny_model(tmp_path / "tiny", tokenizer)
    out = tmp_path / "hf.jsonl"
    evaluate(out, "--policy", "hf", "--policy-opt", f"model={model}", "--tasks", "2", *GUESS_SMALL)
    record = read_records(out)[0]
    assert record.provenance["sampling"]["temperature"] == 0.0
    assert record.provenance["sampling"]["seed"] == 0
    weights = record.provenance["eval"]["weights"]
    assert weights == {"name": str(model), "sha256": hash_weights(model), "path": "full"}
    sampled = evaluate(tmp_path / "t1.jsonl", "--policy", "hf", "--policy-opt", f"model={model}",
                       "--policy-opt", "temperature=1", "--tasks", "2", *GUESS_SMALL)  # fmt: skip
    assert sampled["eval"]["deterministic"] is False


def test_a_preset_names_the_budget(tmp_path) -> None:
    """ALFWorld's gigpo preset on the shipped games: its 50-turn budget and its timeouts are
    what the eval records, and compare reads success from the engine's ``won``."""
    out = tmp_path / "alf.jsonl"
    result = invoke("eval", "alfworld", "--preset", "gigpo", "--set", "data=shipped",
                    "--split", "eval_out_of_distribution", "--tasks", "1", "--out", out,
                    "--json-summary", "--no-progress")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    section = json.loads(result.stdout)["eval"]
    assert section["preset"] == "gigpo" and section["budget"]["max_turns"] == 50
    assert section["budget"]["max_tokens_per_turn"] == 512
    report = json.loads(invoke("compare", out, out, "--json").stdout)
    stats = report["runs"][0]["statistics"]
    assert stats["success_rule"] == "metric won" and stats["success_rate"] == 1.0
    budget = report["runs"][0]["settings"]["budget"]
    assert budget["max_turns"] == 50 and "step_timeout_s" in budget
