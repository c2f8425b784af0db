"""Train/eval parity for a tool protocol: ``agentenvs eval`` of Harbor tasks records the
renderer, template, sampling and tool-call parser with every group, the store passes
``agentenvs check``, and ``compare`` refuses two runs whose tool calls were parsed by
different parsers, naming the difference (the verifiers#2027 failure: eval rollouts
whose calls the training parser would have read otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path

from support import machine_skips
from support.compare_runs import compare, invoke

pytestmark = machine_skips.needs(*machine_skips.LOCAL_SANDBOX)
TASKS = Path(__file__).with_name("tasks")


def run_eval(out: Path, tool_format: str) -> dict:
    result = invoke(
        "eval", "harbor", "--split", "train", "--set", f"tasks={TASKS}", "--set",
        f"tool_format={tool_format}", "--policy", "scripted", "--out", out,
        "--json-summary", "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_eval_records_the_parser_and_compare_refuses_a_different_one(tmp_path):
    hermes, coder = tmp_path / "hermes.jsonl", tmp_path / "coder.jsonl"
    run_eval(hermes, "hermes")
    run_eval(coder, "qwen3_coder")
    record = json.loads(hermes.read_text().splitlines()[-1])
    provenance = record["provenance"]
    assert provenance["env"]["tool_format"] == "hermes"
    assert provenance["env"]["renderer"] == "chat"
    assert provenance["tokenizer"]["chat_template_sha256"]
    assert "temperature" in provenance["sampling"]
    assert provenance["tool_calls"] == {"declared": ["hermes"], "read_as": ["hermes"]}
    checked = invoke("check", hermes)
    assert checked.exit_code == 0, checked.stdout
    code, report, _ = compare(hermes, coder)
    check = report["comparability"]
    assert code == 1 and check["comparable"] is False
    assert check["refused"] == ["tool_parser"]  # nothing else differs between the two runs
    details = [d["detail"] for d in check["differences"] if d["setting"] == "tool_parser"]
    assert any(d.startswith("tool calls parsed differently: format:") for d in details)
    assert any("read_as" in d and "qwen3_coder" in d for d in details)
    code, report, _ = compare(hermes, coder, "--allow", "tool_parser")
    assert code == 0 and report["comparability"]["comparable"] is True
