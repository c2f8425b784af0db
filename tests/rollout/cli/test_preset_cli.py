"""``agentenvs preset`` and the presets in ``list`` and ``rollout --help``."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from agentenvs.rollout.cli import app
from agentenvs.rollout.presets import PRESETS

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_list_shows_each_environments_presets():
    rows = {row["name"]: row for row in json.loads(invoke("list", "--json").stdout)}
    assert rows["search_r1"]["presets"] == ["search_r1"]
    assert rows["retool"]["presets"] == ["verl_retool"]
    assert rows["alfworld"]["presets"] == ["gigpo"]
    assert rows["guess_number"]["presets"] == []
    table = invoke("list")
    assert table.exit_code == 0 and "verl_retool" in table.stdout and "presets" in table.stdout


def test_rollout_help_names_the_presets():
    text = invoke("rollout", "--help").stdout
    for entry in PRESETS.values():
        assert f"{entry.env} --set preset={entry.name}" in text


def test_preset_list_and_show():
    rows = json.loads(invoke("preset", "list", "--json").stdout)
    assert [r["name"] for r in rows] == list(PRESETS)
    shown = json.loads(invoke("preset", "show", "verl_retool", "--json").stdout)
    assert shown["original"]["repo"] == "volcengine/verl"
    knobs = {k["name"]: k for k in shown["knobs"]}
    assert knobs["clip_high"]["value"] == 0.28
    assert knobs["clip_high"]["source"] == "recipe/retool/run_qwen2_7b_dapo.sh:34"
    assert shown["verl"]["settings"]["actor_rollout_ref.actor.clip_ratio_high"] == 0.28
    assert shown["trl"]["settings"]["epsilon_high"] == 0.28
    assert shown["cookbook"]["settings"]["loss_fn_config"]["clip_high_threshold"] == 1.28
    text = invoke("preset", "show", "gigpo", "--target", "verl").stdout
    assert "python3 -m verl.trainer.main_ppo" in text and "algorithm.adv_estimator=grpo" in text
    assert "not set: estimator: verl 0.9.1 has no gigpo estimator" in text
    assert "batch: 256 step rows per optimiser step" in text  # the original's, in rows
    assert "batch differs: verl 0.9.1's agent loop trains one row per episode" in text
    sheet = invoke("preset", "show", "search_r1", "--markdown").stdout
    assert sheet.startswith("#### `search_r1`") and "| batch, in rows |" in sheet
    assert "trl" not in json.loads(
        invoke("preset", "show", "gigpo", "--target", "verl", "--json").stdout
    )


def test_unknown_preset_and_target_are_one_line_errors():
    for args in (("preset", "show", "nosuch"), ("preset", "show", "gigpo", "--target", "x")):
        result = invoke(*args)
        assert result.exit_code == 2
        assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert "presets: gigpo, search_r1, verl_retool" in invoke("preset", "show", "nosuch").stderr


def test_preset_card_prints_the_card():
    result = invoke("preset", "card", "verl_retool", "--tasks", "2")
    assert result.exit_code == 0, result.stderr
    card = json.loads(result.stdout)
    assert card["preset"] == "verl_retool" and card["env"] == "retool"
    assert card["task_panel"]["count"] == 2 and card["oracle_band"] == [1.0, 1.0]
