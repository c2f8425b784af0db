"""`agentenvs compare` as a user runs it: the table, the exit codes, JSON, the PNG, hand-offs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.compare_runs import compare, evaluate, invoke


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("compare")
    made = {}
    for name, variant in (("oracle", "oracle"), ("again", "oracle"), ("malformed", "malformed")):
        made[name] = folder / f"{name}.jsonl"
        evaluate(made[name], "--tasks", "6", "--group-size", "2", "--policy-opt",
                 f"variant={variant}")  # fmt: skip
    return made


def test_the_table_names_the_difference_and_refuses(stores) -> None:
    result = invoke("compare", stores["oracle"], stores["malformed"])
    assert result.exit_code == 1
    text = result.stdout
    assert "REFUSED" in text and 'variant: "oracle" in oracle.jsonl' in text
    assert "paired by task" not in text and "--allow policy" in text
    assert "mean reward" in text and "completed: 12" in text and "max_turns: 12" in text
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: the runs are not comparable")


def test_an_accepted_difference_shows_the_paired_result(stores) -> None:
    result = invoke("compare", stores["oracle"], stores["malformed"], "--allow", "policy",
                    "--resamples", "300", "--seed", "4")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    text = " ".join(re.sub("[│┃]", " ", result.stdout).split())  # wrapped cells joined
    assert "accepted (--allow)" in text
    assert "300 resamples, seed 4" in text
    assert "-2.0000 [-2.0000, -2.0000]: lower (the interval excludes 0)" in text
    assert "0 / 6 / 0 of 6 paired" in text
    assert "100.0%" in text and "0.0%" in text  # success rates side by side


def test_json_for_scripts_and_three_runs_against_the_first(stores) -> None:
    code, report, _ = compare(stores["oracle"], stores["again"], stores["malformed"],
                              "--allow", "policy")  # fmt: skip
    assert code == 0
    assert [r["label"] for r in report["runs"]] == ["oracle.jsonl", "again.jsonl",
                                                   "malformed.jsonl"]  # fmt: skip
    assert [(p["baseline"], p["other"]) for p in report["paired"]] == [
        ("oracle.jsonl", "again.jsonl"), ("oracle.jsonl", "malformed.jsonl")]  # fmt: skip
    same, worse = report["paired"]
    assert same["reward"]["mean_difference"] == 0 and same["ties"] == 6
    assert worse["reward"]["ci"][1] < 0 and worse["losses"] == 6
    stats = report["runs"][2]["statistics"]
    assert stats["mean_reward"] == pytest.approx(-1.0) and stats["success_rate"] == 0
    assert stats["zero_advantage_share"] == 1.0 and stats["mean_turns"] == 10
    assert report["bootstrap"] == {"resamples": 2000, "seed": 0, "level": 0.95}
    assert report["runs"][0]["panel"] == [f"test/{i}" for i in range(6)]


def test_the_png_shows_both_plots(stores, tmp_path) -> None:
    import matplotlib.image

    png = tmp_path / "plots" / "cmp.png"
    result = invoke("compare", stores["oracle"], stores["malformed"], "--allow", "policy",
                    "--png", png)  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(png)
    height, width = pixels.shape[:2]
    assert width > 2 * height  # two panels side by side
    for half in (pixels[:, : width // 2], pixels[:, width // 2 :]):
        assert half.std() > 0.05  # something is drawn in each panel, not a blank canvas

    refused = tmp_path / "refused.png"  # written all the same: the reward histograms alone
    result = invoke("compare", stores["oracle"], stores["malformed"], "--png", refused)
    assert result.exit_code == 1
    pixels = matplotlib.image.imread(refused)
    assert pixels.shape[1] < 2 * pixels.shape[0] and pixels.std() > 0.05


def test_a_jsonl_handoff_compares_by_group_with_its_missing_provenance_named(
    stores, tmp_path
) -> None:
    from agentenvs.rollout.collect.store import read_records
    from agentenvs.rollout.data.samples import trajectories_to_samples
    from agentenvs.rollout.trainers.jsonl.handoff import write_samples_jsonl

    handoffs = []
    for name in ("oracle", "malformed"):
        groups = [r.group for r in read_records(stores[name])]
        samples = trajectories_to_samples(groups, [[0.0] * len(g.trajectories) for g in groups])
        handoffs.append(tmp_path / f"{name}.samples.jsonl")
        write_samples_jsonl(samples, handoffs[-1])
    code, report, _ = compare(*handoffs)
    assert code == 1 and report["comparability"]["refused"] == ["provenance"]
    code, report, _ = compare(*handoffs, "--allow", "provenance")
    assert code == 0
    pair = report["paired"][0]
    assert pair["tasks"] == 6 and pair["reward"]["mean_difference"] == pytest.approx(-2.0)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["ONE"], "at least two runs"),
        (["ONE", "NOT_A_STORE"], "neither a trajectory store"),
        (["ONE", "ONE", "--level", "1.5"], "--level must be between 0 and 1"),
        (["ONE", "ONE", "--resamples", "0"], "--resamples must be at least 1"),
        (["ONE", "MISSING"], "no such file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(stores, tmp_path, args, fragment) -> None:
    junk = tmp_path / "junk.jsonl"
    junk.write_text(json.dumps({"hello": 1}) + "\n")
    names = {"ONE": stores["oracle"], "NOT_A_STORE": junk, "MISSING": tmp_path / "nope.jsonl"}
    result = invoke("compare", *[names.get(a, a) for a in args])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in result.stderr
