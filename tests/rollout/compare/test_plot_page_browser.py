"""compare's HTML page in a real browser: headless Chromium lays out the charts, and the test
reads their geometry back: bars where the numbers say, on the side of zero they belong."""

from __future__ import annotations

import json

import pytest
from support import machine_skips
from support.browser_cdp import open_browser
from support.compare_runs import evaluate, invoke

pytestmark = [machine_skips.needs("chromium"), pytest.mark.services]

TASKS = 12


@pytest.fixture(scope="module")
def page_and_report(tmp_path_factory):
    """The oracle with its full 10 turns against the oracle cut to 5: bisection over 1..100
    needs up to 7 guesses, so some tasks are lost to the budget and the rest tie."""
    folder = tmp_path_factory.mktemp("page")
    full, short = folder / "full.jsonl", folder / "short.jsonl"
    evaluate(full, "--tasks", TASKS, "--group-size", "2")
    evaluate(short, "--tasks", TASKS, "--group-size", "2", "--set", "limits.max_turns=5")
    html = folder / "cmp.html"
    shown = invoke("compare", full, short, "--allow", "budget", "--html", html, "--json")
    assert shown.exit_code == 0, shown.stderr
    return html, json.loads(shown.stdout)


BOX = "(e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom, r.width, r.height]; })"


def test_the_charts_render_where_the_numbers_say(page_and_report) -> None:
    html, report = page_and_report
    pair = report["paired"][0]
    lost = sorted(v for v in pair["per_task"].values() if v < 0)
    assert lost and len(lost) < TASKS  # both kinds of task are on the chart
    page_text = html.read_text()
    assert "http://" not in page_text and "<script" not in page_text  # self-contained
    with open_browser() as page:
        page.set_viewport(1200, 900)
        page.navigate(html.as_uri())
        page.wait_for("document.readyState === 'complete'")
        assert page.exceptions == []

        bars = page.evaluate(
            f"Array.from(document.querySelectorAll('#paired-0 rect.diff')).map(e => "
            f"[Number(e.dataset.value), ...{BOX}(e)])"
        )
        assert [round(b[0], 6) for b in bars] == [
            round(v, 6) for v in sorted(pair["per_task"].values())
        ]
        axis = page.evaluate(f"{BOX}(document.querySelector('#paired-0 line:not(.mean)'))")
        zero = axis[0]
        for value, top, _bottom, width, height in bars:
            assert width > 0
            if value < 0:  # below the zero line, as tall as the loss
                assert top == pytest.approx(zero, abs=1.5) and height > 20
            else:
                assert height < 2  # a tie is a sliver on the line
        band = page.evaluate(f"{BOX}(document.querySelector('#paired-0 rect.ci'))")
        mean = page.evaluate(f"{BOX}(document.querySelector('#paired-0 line.mean'))")
        assert band[0] - 1 <= mean[0] <= band[1] + 1  # the mean lies inside its interval
        assert band[1] > zero + 1  # the interval lies below zero: the cut budget loses

        counts = page.evaluate(
            f"Array.from(document.querySelectorAll('#rewards rect.bar')).map(e => "
            f"[e.dataset.run, Number(e.dataset.count), ...{BOX}(e)])"
        )
        trajectories = {"full.jsonl": 0, "short.jsonl": 0}
        tallest = max(c[1] for c in counts)
        full_height = max(c[5] for c in counts)
        for run, count, _top, _bottom, _width, height in counts:
            trajectories[run] += count
            assert height == pytest.approx(full_height * count / tallest, abs=1.0)
        assert trajectories == {"full.jsonl": 2 * TASKS, "short.jsonl": 2 * TASKS}
        verdict = page.evaluate("document.querySelector('p.verdict').textContent")
        assert "2000 resamples, seed 0" in verdict and "lower" in verdict
        shot = page.screenshot()
        assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 10_000
