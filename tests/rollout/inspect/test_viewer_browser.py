"""The HTML view in a real browser: headless Chromium loads the page, and the test clicks
through groups, filters, sorting and paging as a person would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import machine_skips
from support.browser_cdp import open_browser
from typer.testing import CliRunner

from agentenvs.rollout.cli import app
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import TrajectoryStore

pytestmark = [
    machine_skips.needs("chromium"),
    pytest.mark.services,
]

runner = CliRunner()
GROUPS = 60  # more than one page of 50


@pytest.fixture(scope="module")
def page_file(tmp_path_factory) -> tuple[Path, list[dict]]:
    folder = tmp_path_factory.mktemp("browser")
    store = folder / "g.jsonl"
    result = runner.invoke(
        app,
        ["rollout", "guess_number", "--groups", str(GROUPS), "--group-size", "2", "--out",
         str(store), "--json-summary", "--no-progress", "--set", "limits.max_turns=6"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    run = json.loads(store.read_text().splitlines()[0])["run"]
    failed = GroupRecord(
        "zz:broken", "guess_number", "broken", None, status="failed",
        error="failed after 2 attempts: attempt 1: RuntimeError: first <b>line</b>\n"
        "second line; attempt 2: TimeoutError: group took longer than 5s",
        attempts=2, run=run,
    )  # fmt: skip
    TrajectoryStore(store).append(failed)
    html = folder / "g.html"
    shown = runner.invoke(app, ["view", str(store), "--html", str(html)])
    assert shown.exit_code == 0, shown.stderr
    records = [json.loads(line) for line in store.read_text().splitlines()]
    return html, records


def rows(page) -> list[str]:
    return page.evaluate(
        "Array.from(document.querySelectorAll('#list tr.row')).map(r => r.dataset.group)"
    )


def test_the_page_loads_and_clicks_through_groups_and_filters(page_file, tokenizer) -> None:
    html, records = page_file
    with open_browser() as page:
        page.navigate(html.as_uri())
        page.wait_for("document.body && document.body.dataset.ready === '1'")

        # The list: one page of 50 rows, reward and status per group.
        assert rows(page) == [str(i) for i in range(50)]
        assert "page 1 of 2" in page.evaluate("document.querySelector('.pager').textContent")
        assert page.evaluate("document.getElementById('detail').dataset.group") == "0"

        # The first group's stream is the tokens the policy saw, decoded.
        traj = records[0]["trajectories"][0]
        sampled = page.evaluate(
            "Array.from(document.querySelectorAll('#detail details.traj')[0]"
            ".querySelectorAll('.seg.sampled')).map(s => s.textContent).join('')"
        )
        assert sampled == "".join(tokenizer.decode(t["ac"]) for t in traj["transitions"])
        markers = page.evaluate(
            "Array.from(document.querySelectorAll('#detail details.traj')[0]"
            ".querySelectorAll('.turn')).map(s => s.textContent)"
        )
        assert markers == [f"turn {i}" for i in range(len(traj["transitions"]))]
        advantage = page.evaluate(
            "document.querySelector('#detail table.trajectories tr:nth-child(2) td:nth-child(5)')"
            ".textContent"
        )
        assert float(advantage) == pytest.approx(records[0]["extra"]["advantages"][0], abs=1e-3)

        # Hovering a sampled token shows its id.
        page.evaluate(
            "document.querySelector('#detail .seg.sampled > span')"
            ".dispatchEvent(new MouseEvent('mouseover', {bubbles: true}))"
        )
        title = page.evaluate("document.querySelector('#detail .seg.sampled > span').title")
        assert title.startswith(f"id {traj['transitions'][0]['ac'][0]}")

        # Click a group; the detail follows, and j moves to the next one.
        page.click('#list tr.row[data-group="7"]')
        page.wait_for("document.getElementById('detail').dataset.group === '7'")
        key = page.evaluate("document.querySelector('#detail h2').textContent")
        assert f"key {records[7]['key']}" in key
        page.key("j")
        page.wait_for("document.getElementById('detail').dataset.group === '8'")

        # Paging.
        page.click("#next-page")
        page.wait_for("document.querySelectorAll('#list tr.row').length === 11")
        assert rows(page)[-1] == str(GROUPS)  # the failed group sits last in file order

        # Filter by status: the failed group and its whole error.
        page.evaluate(
            "var s = document.getElementById('f-status'); s.value = 'failed';"
            "s.dispatchEvent(new Event('change'))"
        )
        page.wait_for("document.querySelectorAll('#list tr.row').length === 1")
        page.click('#list tr.row[data-group="60"]')
        error = page.wait_for("document.querySelector('#detail pre.error')?.textContent")
        assert error == records[-1]["error"]  # every attempt, markup shown as text
        assert page.evaluate("document.querySelectorAll('#detail b').length") == 0

        # Sort by reward, lowest first, among ok groups; filter by stop reason.
        page.evaluate(
            "var s = document.getElementById('f-status'); s.value = 'ok';"
            "s.dispatchEvent(new Event('change'));"
            "var o = document.getElementById('sort'); o.value = 'reward-asc';"
            "o.dispatchEvent(new Event('change'))"
        )
        page.wait_for("document.querySelectorAll('#list tr.row').length === 50")
        shown = [int(i) for i in rows(page)]
        mean = {i: sum(r["total_rewards"]) / len(r["total_rewards"]) for i, r in
                enumerate(records[:GROUPS])}  # fmt: skip
        expected = sorted(range(GROUPS), key=lambda i: (mean[i], i))[:50]
        assert shown == expected
        stops = sorted({t["stop_reason"] for r in records[:GROUPS] for t in r["trajectories"]})
        page.evaluate(
            f"var s = document.getElementById('f-stop'); s.value = {json.dumps(stops[0])};"
            "s.dispatchEvent(new Event('change'))"
        )
        with_stop = [
            i for i, r in enumerate(records[:GROUPS])
            if stops[0] in {t["stop_reason"] for t in r["trajectories"]}
        ]  # fmt: skip
        expected = sorted(with_stop, key=lambda i: (mean[i], i))[:50]
        count = len(expected)
        page.wait_for(f"document.querySelectorAll('#list tr.row').length === {count}")
        assert [int(i) for i in rows(page)] == expected
        assert page.exceptions == []
