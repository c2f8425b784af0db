"""Reading a score out of a judge's text: what counts, and every way it fails."""

from __future__ import annotations

import pytest

from agentenvs.envs.rewards.verdict import FAILED_STATUSES, Verdict, parse_score


@pytest.mark.parametrize(
    ("text", "status", "score"),
    [
        ("Looks right.\nSCORE: 8", "ok", 8.0),
        ("score = 7.5", "ok", 7.5),
        ("**Score:** 3", "ok", 3.0),
        ("Reply as SCORE: N.\nMy verdict... SCORE: 2", "ok", 2.0),  # the last one counts
        ("The answer is fine, ten out of ten", "no_score", None),
        ("8/10", "no_score", None),
        ("SCORE: 11", "out_of_range", 11.0),
        ("SCORE: -1", "out_of_range", -1.0),
        ("   \n", "empty", None),
    ],
)
def test_parse_score(text, status, score):
    parsed = parse_score(text, 0, 10)
    assert (parsed.status, parsed.score) == (status, score)


def test_a_failed_verdict_logs_its_status_and_raw_text_and_counts_as_failed():
    verdict = Verdict("no_score", None, 0.0, "no idea", "judge-m", "ab" * 8, weights="base:j@12")
    logs = verdict.logs()
    assert logs["judge/status"] == "no_score" and logs["judge/verdict"] == "no idea"
    assert (logs["judge/model"], logs["judge/weights"]) == ("judge-m", "base:j@12")
    assert "judge/score" not in logs
    assert verdict.failed and verdict.metrics() == {"judge/reward": 0.0, "judge/failed": 1}
    assert "ok" not in FAILED_STATUSES and "not_judged" not in FAILED_STATUSES
