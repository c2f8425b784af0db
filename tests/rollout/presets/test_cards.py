"""Reproduction cards on real stores: ALFWorld (the real engine) collected with the
scripted oracle under preset=gigpo, checked with ``agentenvs check --card`` as a user
runs it, then drifted stores that must fail: a changed knob (in any group), other game
data, the panel out of order, a first prompt the environment no longer renders, a
reward outside the oracle's band, another chat template. Data and sampling drift of
Search-R1 and ReTool runs: test_card_drift.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentenvs.rollout.collect.store import read_records
from agentenvs.rollout.presets.card import check_store_against_card, compute_card

AGENTENVS = str(Path(sys.executable).parent / "agentenvs")


def collect(path: Path, *sets: str) -> Path:
    command = [AGENTENVS, "rollout", "alfworld", "--set", "preset=gigpo", "--set", "data=shipped",
               "--groups", "2", "--group-size", "2", "--out", str(path), "--no-progress",
               "--json-summary"]  # fmt: skip
    for item in sets:
        command += ["--set", item]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return path


def check_card(path: Path, name: str = "gigpo") -> tuple[int, list[dict]]:
    """``agentenvs check --card`` as a user runs it. ALFWorld's own data folder is pointed
    at an empty one, so the card reads the shipped games on any machine (data=auto)."""
    empty = path.parent / "no-alfworld-data"
    empty.mkdir(exist_ok=True)
    done = subprocess.run(
        [AGENTENVS, "check", str(path), "--card", name, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "ALFWORLD_DATA": str(empty)},
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    findings = json.loads(done.stdout)["findings"]
    return done.returncode, [f for f in findings if f["check"] == "fixed_input"]


def card_failures(findings: list[dict]) -> list[str]:
    return [f["detail"] for f in findings if f["status"] == "fail"]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return collect(tmp_path_factory.mktemp("card") / "gigpo.jsonl")


def rewrite(source: Path, target: Path, edit) -> Path:
    lines = [json.loads(line) for line in source.read_text().splitlines()]
    edit(lines)
    target.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return target


def test_the_store_the_preset_makes_passes_its_card(store):
    code, findings = check_card(store)
    assert code == 0 and not card_failures(findings), findings
    assert any("2 groups on the panel, prompts match" in f["detail"] for f in findings)
    assert any("oracle rewards in [10, 10]" in f["detail"] for f in findings)


def test_another_presets_card_fails_it(store):
    code, findings = check_card(store, "search_r1")
    assert code == 1
    assert card_failures(findings) == ["env 'alfworld'; preset search_r1 is 'search_r1'"]


def test_a_changed_knob_fails_and_is_named(tmp_path):
    drifted = collect(tmp_path / "window3.jsonl", "history_window=3")
    code, findings = check_card(drifted)
    assert code == 1
    (failure,) = [d for d in card_failures(findings) if d.startswith("config differs")]
    assert "in 2 of 2 groups" in failure and "history_window: 3 in the store, 2 now" in failure


def test_every_groups_config_is_compared_not_only_the_first(store, tmp_path):
    def second_drifts(lines):
        lines[1]["env_config"]["history_window"] = 3

    code, findings = check_card(rewrite(store, tmp_path / "second.jsonl", second_drifts))
    assert code == 1
    (failure,) = [d for d in card_failures(findings) if d.startswith("config differs")]
    assert "in 1 of 2 groups" in failure and "history_window: 3 in the store, 2 now" in failure
    (where,) = [f["where"] for f in findings if f["detail"] == failure]
    assert where == json.loads(store.read_text().splitlines()[1])["key"]


def test_games_of_other_content_fail_as_data(store, tmp_path):
    def other_games(lines):
        for line in lines:
            line["provenance"]["env"]["data"]["games"] = "0123456789abcdef"

    code, findings = check_card(rewrite(store, tmp_path / "games.jsonl", other_games))
    assert code == 1
    (failure,) = [d for d in card_failures(findings) if d.startswith("data games")]
    assert failure.startswith("data games: 0123456789abcdef in the store, ")


def test_a_reward_outside_the_oracle_band_fails(tmp_path):
    drifted = collect(tmp_path / "reward1.jsonl", "success_reward=1")
    code, findings = check_card(drifted)
    assert code == 1
    failures = card_failures(findings)
    assert any("success_reward: 1.0 in the store, 10.0 now" in d for d in failures)
    assert any("scripted oracle reward 1 outside the card's band [10, 10]" in d for d in failures)


def test_tasks_out_of_the_panels_order_fail(store, tmp_path):
    def swap(lines):  # group 0 now claims the task of group 1 and the reverse
        lines[0]["key"], lines[1]["key"] = (
            lines[0]["key"].replace("0:", "1:", 1),
            lines[1]["key"].replace("1:", "0:", 1),
        )

    code, findings = check_card(rewrite(store, tmp_path / "swapped.jsonl", swap))
    assert code == 1
    assert any(
        "group 0 is task" in d and "the card's panel has" in d for d in card_failures(findings)
    )


def test_a_first_prompt_the_env_no_longer_renders_fails(store, tmp_path, tokenizer):
    records = read_records(store)
    assert not [
        s for s, _, _ in check_store_against_card(records, "gigpo", tokenizer) if s == "fail"
    ]
    first = records[0].group.trajectories[0].transitions[0]
    first.ob = [*first.ob[:5], first.ob[5] + 1, *first.ob[6:]]  # one token of the prompt
    failures = [
        d for s, d, _ in check_store_against_card(records, "gigpo", tokenizer) if s == "fail"
    ]
    assert any(d.startswith("first prompt differs") for d in failures), failures


def test_another_chat_template_fails(store, tmp_path):
    from support.vocab import load_vocabulary

    qwen = load_vocabulary("qwen2.5")
    failures = [
        d for s, d, _ in check_store_against_card(read_records(store), "gigpo", qwen) if s == "fail"
    ]
    assert any(d.startswith("tokenizer vocab") for d in failures), failures
    assert any(d.startswith("first prompt differs") for d in failures), failures


def test_the_card_says_what_it_hashes(tokenizer):
    card = compute_card("gigpo", tokenizer, count=3, location={"data": "shipped"})
    assert card["task_panel"]["count"] == 3 and len(card["task_panel"]["ids"]) == 3
    assert len(card["first_prompts"]["per_task"]) == 3
    assert list(card["data"]["sources"]) == ["games"]
    assert card["sampling"] == {"temperature": 1.0, "top_p": 1.0, "max_tokens_per_turn": 512}
    assert card["reward"]["module"] == "agentenvs.envs.alfworld.env"
    assert card["oracle_band"] == [10.0, 10.0]
    again = compute_card("gigpo", tokenizer, count=3, location={"data": "shipped"})
    assert again == card  # computed from the live code and data: same inputs, same card
    more = compute_card("gigpo", tokenizer, count=4, location={"data": "shipped"})
    assert more["task_panel"]["ids"][:3] == card["task_panel"]["ids"]
    assert more["task_panel"]["sha256"] != card["task_panel"]["sha256"]
