"""compare's first question, over stores made by real eval runs: are these runs comparable?

Each changed setting (budget, template, split, group size, config, renderer, sampling,
panel) must be refused with exit 1 and named with both values, and accepted once
``--allow`` names it. Weights are told apart by content hash, and the page says which.
"""

from __future__ import annotations

import shutil
from html import escape
from pathlib import Path

import pytest
from support.compare_runs import GUESS_SMALL, compare, evaluate, invoke

from agentenvs.rollout.policies.tiny_model import save_tiny_model


def test_two_runs_of_the_same_policy_and_panel_compare_as_equal(oracle_store, tmp_path) -> None:
    again = tmp_path / "again.jsonl"
    evaluate(again, "--tasks", "6", "--group-size", "2")
    code, report, _ = compare(oracle_store, again)
    assert code == 0
    assert report["comparability"]["differences"] == [] and report["comparability"]["comparable"]
    pair = report["paired"][0]
    assert pair["tasks"] == 6 and pair["ties"] == 6
    low, high = pair["reward"]["ci"]
    assert low <= 0 <= high and "includes 0" in pair["reward"]["verdict"]


@pytest.fixture(scope="module")
def other_template(tmp_path_factory, tokenizer) -> Path:
    """The suite's tokenizer with a chat template that renders the same but hashes differently."""
    folder = tmp_path_factory.mktemp("template") / "tok"
    tokenizer.save_pretrained(folder)
    template = folder / "chat_template.jinja"
    template.write_text("{#- a comment changes the template's hash, not its output -#}\n"
                        + template.read_text())  # fmt: skip
    return folder


def changed(name: str, folder: Path | None = None) -> list[str]:
    return {
        "budget": ["--set", "limits.max_turns=7"],
        "split": ["--split", "train"],
        "group_size": ["--group-size", "3"],
        "template": ["--tokenizer", str(folder)],
        "config": ["--set", "high=90"],
        "renderer": ["--set", "renderer=continuation"],
    }[name]


@pytest.mark.parametrize(
    ("setting", "fragment"),
    [
        ("budget", "max_turns: 10 in oracle.jsonl, 7 in changed.jsonl"),
        ("split", 'split: "test" in oracle.jsonl, "train" in changed.jsonl'),
        ("group_size", "group size: 2 in oracle.jsonl, 3 in changed.jsonl"),
        ("template", "template: "),
        ("config", "high: 100 in oracle.jsonl, 90 in changed.jsonl"),
        ("renderer", 'renderer: "chat" in oracle.jsonl, "continuation" in changed.jsonl'),
    ],
)
def test_a_changed_setting_is_refused_and_named(
    oracle_store, tmp_path, other_template, setting, fragment
) -> None:
    other = tmp_path / "changed.jsonl"
    group = [] if setting == "group_size" else ["--group-size", "2"]
    evaluate(other, "--tasks", "6", *group, *changed(setting, other_template))
    code, report, stderr = compare(oracle_store, other)
    assert code == 1
    check = report["comparability"]
    assert setting in check["refused"] and not check["comparable"]
    details = [d["detail"] for d in check["differences"] if d["setting"] == setting]
    assert any(fragment in d for d in details), details
    assert report["paired"] == []  # no numbers over runs nobody accepted as comparable
    assert f"--allow {','.join(check['refused'])}" in stderr
    others = {d["setting"] for d in check["differences"]} - {setting}
    assert others <= ({"panel"} if setting == "split" else set()), check["differences"]

    code, report, _ = compare(oracle_store, other, "--allow", ",".join(check["refused"]))
    assert code == 0 and report["comparability"]["comparable"]
    if setting == "split":  # accepted, but no task is in both panels
        assert report["paired"] == []
        assert any("share no task" in n for n in report["comparability"]["notes"])
    else:
        assert report["paired"][0]["tasks"] == 6


def test_a_partial_panel_names_the_missing_tasks(oracle_store, tmp_path) -> None:
    short = tmp_path / "short.jsonl"
    evaluate(short, "--tasks", "4", "--group-size", "2")
    code, report, _ = compare(oracle_store, short)
    assert code == 1 and report["comparability"]["refused"] == ["panel"]
    (detail,) = [d["detail"] for d in report["comparability"]["differences"]]
    assert "2 tasks only in oracle.jsonl (test/4, test/5)" in detail
    code, report, _ = compare(oracle_store, short, "--allow", "panel")
    assert code == 0 and report["paired"][0]["tasks"] == 4
    assert report["paired"][0]["unpaired_tasks"] == 2


def test_an_unknown_allow_name_is_bad_input(oracle_store) -> None:
    result = invoke("compare", oracle_store, oracle_store, "--allow", "polcy")
    assert result.exit_code == 2
    assert "unknown setting polcy" in result.stderr and "policy" in result.stderr


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory, tokenizer) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("weights")
    first = save_tiny_model(root / "first", tokenizer, seed=0)
    renamed = root / "renamed"
    shutil.copytree(first, renamed)
    return first, renamed


def greedy(out: Path, model: Path) -> dict:
    return evaluate(out, "--policy", "hf", "--policy-opt", f"model={model}", "--tasks", "3",
                    *GUESS_SMALL)  # fmt: skip


def test_same_weights_under_two_names_and_two_weights_under_one(tiny_dirs, tmp_path) -> None:
    first, renamed = tiny_dirs
    greedy(tmp_path / "a.jsonl", first)
    greedy(tmp_path / "b.jsonl", renamed)
    code, report, _ = compare(tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    check = report["comparability"]
    assert code == 0 and check["differences"] == [], check  # the same content hash
    assert any("same weights under different names" in n for n in check["notes"])
    hashes = {w["sha256"] for run in report["runs"] for w in run["weights"]}
    assert len(hashes) == 1 and None not in hashes
    (digest,) = hashes
    page = tmp_path / "same.html"
    shown = invoke("compare", tmp_path / "a.jsonl", tmp_path / "b.jsonl", "--html", page)
    assert shown.exit_code == 0, shown.stderr
    assert "same weights under different names" in " ".join(shown.stdout.split())
    text = page.read_text()  # which weights is on the page, by name and content hash
    for model in (first, renamed):
        assert f"{escape(str(model))} sha256 {digest[:12]}" in text
    assert "same weights under different names" in text

    tokenizer_files = {p.name for p in first.iterdir()} - {"model.safetensors", "config.json"}
    assert tokenizer_files  # the weights change below, the tokenizer does not
    from agentenvs.rollout.policies.tiny_model import build_tiny_model
    from agentenvs.rollout.tokenizer import load_tokenizer

    build_tiny_model(load_tokenizer(str(first)), seed=1).save_pretrained(first)  # new weights
    greedy(tmp_path / "c.jsonl", first)
    code, report, _ = compare(tmp_path / "a.jsonl", tmp_path / "c.jsonl")
    check = report["comparability"]
    assert code == 1 and check["refused"] == ["weights"], check
    assert any(f"different weights under one name: {first}" in n for n in check["notes"])
    page = tmp_path / "changed.html"
    shown = invoke("compare", tmp_path / "a.jsonl", tmp_path / "c.jsonl", "--html", page)
    assert shown.exit_code == 1
    text = page.read_text()
    assert "different weights under one name" in text and "REFUSED" in text
    (new_digest,) = {w["sha256"] for w in report["runs"][1]["weights"]}
    assert new_digest != digest and f"sha256 {new_digest[:12]}" in text
    assert "different weights under one name" in " ".join(shown.stdout.split())


def test_changed_sampling_is_refused_and_named(tiny_dirs, tmp_path) -> None:
    _, model = tiny_dirs
    greedy(tmp_path / "greedy.jsonl", model)
    evaluate(tmp_path / "hot.jsonl", "--policy", "hf", "--policy-opt", f"model={model}",
             "--policy-opt", "temperature=1", "--tasks", "3", *GUESS_SMALL)  # fmt: skip
    code, report, _ = compare(tmp_path / "greedy.jsonl", tmp_path / "hot.jsonl")
    check = report["comparability"]
    assert code == 1 and check["refused"] == ["sampling"], check
    (detail,) = [d["detail"] for d in check["differences"]]
    assert detail == "temperature: 0.0 in greedy.jsonl, 1.0 in hot.jsonl"
    code, report, _ = compare(tmp_path / "greedy.jsonl", tmp_path / "hot.jsonl",
                              "--allow", "sampling")  # fmt: skip
    assert code == 0 and report["paired"][0]["tasks"] == 3
