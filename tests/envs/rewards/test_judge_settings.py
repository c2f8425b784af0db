"""Judge settings and prompts: loading, hashing, rendering in one pass, bad setups refused."""

from __future__ import annotations

import pytest

from agentenvs.envs.rewards.judge_settings import (
    DEFAULT_PROMPT,
    JudgePrompt,
    JudgeSettings,
    JudgeSetupError,
)


def test_the_shipped_prompt_has_every_placeholder_and_a_stable_hash():
    prompt = JudgePrompt.load()
    assert prompt.source == str(DEFAULT_PROMPT)
    for name in ("question", "response", "reference", "rubric"):
        assert "{" + name + "}" in prompt.template
    assert prompt.sha256 == JudgePrompt.load(DEFAULT_PROMPT).sha256 and len(prompt.sha256) == 16


def test_a_response_quoting_a_placeholder_is_not_expanded(tmp_path):
    file = tmp_path / "p.txt"
    file.write_text("Q {question} R {response} REF {reference}")
    prompt = JudgePrompt.load(file)
    text = prompt.render({"question": "q", "response": "say {reference}!", "reference": "42"})
    assert text == "Q q R say {reference}! REF 42"  # the answer never leaks into the response
    file.write_text("Q {question} R {response} REF {reference}.")
    assert JudgePrompt.load(file).sha256 != prompt.sha256


def test_bad_prompts_and_settings_are_refused_clearly(tmp_path):
    with pytest.raises(JudgeSetupError, match="cannot read"):
        JudgePrompt.load(tmp_path / "missing.txt")
    (tmp_path / "p.txt").write_text("no placeholder")
    with pytest.raises(JudgeSetupError, match="response"):
        JudgePrompt.load(tmp_path / "p.txt")
    with pytest.raises(ValueError, match="max_score"):
        JudgeSettings(base_url="http://x", model="m", min_score=5, max_score=5)
    with pytest.raises(ValueError, match="cache_dir"):
        JudgeSettings(base_url="http://x", model="m", cache="disk")
