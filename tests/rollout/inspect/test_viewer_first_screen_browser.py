"""The HTML view's first screen in a real browser (issue 30, item 10), in a laptop's
window (1280 x 700: a 1280 x 800 screen less the browser's own bars) on real stores:
Search-R1 with groups of 4 (as in the issue) and ALFWorld (long prompts, long keys).

Each check looks at what is drawn: a screenshot for the sampled colour below the
header, and DOM geometry for the group list, the turn badges and the folded prompt.
Screenshots are kept under the test's temporary folder for a person to look at.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from support import machine_skips
from support.browser_cdp import open_browser
from typer.testing import CliRunner

from agentenvs.rollout.cli import app
from agentenvs.rollout.collect.records import GroupRecord

pytestmark = [machine_skips.needs("chromium"), pytest.mark.services]

runner = CliRunner()
WIDTH, HEIGHT = 1280, 700
SAMPLED_BG = (0xD5, 0xF5, 0xE3)  # --sampled-bg in viewer.html.j2
READY = "document.body && document.body.dataset.ready === '1'"


def make_page(folder: Path, env: str, groups: int, size: int) -> tuple[Path, list[dict]]:
    store = folder / f"{env}.jsonl"
    result = runner.invoke(
        app,
        ["rollout", env, "--groups", str(groups), "--group-size", str(size), "--out", str(store),
         "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    html = folder / f"{env}.html"
    shown = runner.invoke(app, ["view", str(store), "--html", str(html)])
    assert shown.exit_code == 0, shown.stderr
    return html, [json.loads(line) for line in store.read_text().splitlines()]


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, tuple[Path, list[dict]]]:
    folder = tmp_path_factory.mktemp("first-screen")
    return {
        "search_r1": make_page(folder, "search_r1", 3, 4),
        "alfworld": make_page(folder, "alfworld", 3, 2),
    }


def opened(page, html: Path) -> None:
    page.set_viewport(WIDTH, HEIGHT)
    page.navigate(html.as_uri())
    page.wait_for(READY)


def sampled_pixels_below_header(png: bytes, header_bottom: float) -> int:
    """Pixels of the sampled tokens' background below the header (whose legend has one)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    top = int(header_bottom) + 1
    body = image.crop((0, top, image.width, image.height))
    return sum(count for count, colour in body.getcolors(1 << 20) or [] if colour == SAMPLED_BG)


BADGE_BG = (0x63, 0x66, 0xF1)  # .turn's background in viewer.html.j2
RECT = "(function (r) {{ return {{x: r.left, y: r.top, w: r.width, h: r.height}}; }})({})"


def _crop(png: bytes, box: dict):
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    return image.crop(
        (int(box["x"]), int(box["y"]), int(box["x"] + box["w"]), int(box["y"] + box["h"]))
    )


def ink_pixels(png: bytes, box: dict) -> int:
    """Pixels drawn inside ``box`` (CSS px = screenshot px at scale 1) that stand out from
    its background (its commonest colour): text, even grey text."""
    colours = _crop(png, box).getcolors(1 << 20) or []
    if not colours:
        return 0
    ground = max(colours)[1]
    return sum(
        count
        for count, c in colours
        if sum(abs(x - y) for x, y in zip(c, ground, strict=True)) > 150
    )


def colour_share(png: bytes, box: dict, colour: tuple[int, int, int]) -> float:
    crop = _crop(png, box)
    hits = sum(count for count, c in crop.getcolors(1 << 20) or [] if c == colour)
    return hits / max(1, crop.width * crop.height)


@pytest.mark.parametrize("env", ["search_r1", "alfworld"])
def test_the_first_screen_shows_a_sampled_token(pages, env, tmp_path) -> None:
    html, _records = pages[env]
    with open_browser() as page:
        opened(page, html)
        shot = page.screenshot()
        (tmp_path / f"{env}-first-screen.png").write_bytes(shot)
        header = page.evaluate("document.querySelector('header').getBoundingClientRect().bottom")
        assert page.evaluate("window.scrollY") == 0
        first = page.evaluate(
            "(function () { var r = document.querySelector('#detail .seg.sampled > span')"
            ".getBoundingClientRect(); return [r.top, r.bottom]; })()"
        )
        assert first[0] >= 0 and first[1] <= HEIGHT, (first, tmp_path)
        # A sampled token is drawn, not only laid out: its colour is on the screenshot.
        assert sampled_pixels_below_header(shot, header) > 300, tmp_path
        assert page.exceptions == []


def test_a_folded_prompt_keeps_every_token_and_unfolds(pages, tokenizer) -> None:
    html, records = pages["search_r1"]
    prompt = GroupRecord.from_json(records[0]).group.trajectories[0].transitions[0].ob
    with open_browser() as page:
        opened(page, html)
        seg = "document.querySelector('#detail details.traj .seg.prompt')"
        assert page.evaluate(f"{seg}.classList.contains('folded')")
        # The fold shows the prompt's end (the question, the assistant header) ...
        assert page.evaluate(f"{seg}.scrollTop + {seg}.clientHeight >= {seg}.scrollHeight - 1")
        # ... and keeps the whole prompt in the stream.
        text = page.evaluate(f"{seg}.textContent")
        assert text == tokenizer.decode(prompt)
        page.click("#detail details.traj button.fold-toggle")
        page.wait_for(f"!{seg}.classList.contains('folded')")
        assert page.evaluate(f"{seg}.scrollHeight <= {seg}.clientHeight + 1")


def test_the_group_list_fits_alfworld_keys(pages, tmp_path) -> None:
    html, records = pages["alfworld"]
    keys = [r["key"] for r in records]
    assert max(len(k) for k in keys) > 60  # the keys this is about
    with open_browser() as page:
        opened(page, html)
        (tmp_path / "alfworld-list.png").write_bytes(page.screenshot())
        box = page.evaluate(
            "(function () { var l = document.getElementById('list'); var r = l.getBoundingClientRect();"
            " var reward = Array.from(l.querySelectorAll('th')).filter(t => t.textContent === 'reward')[0]"
            ".getBoundingClientRect();"
            " return {scroll: l.scrollWidth, client: l.clientWidth, right: r.right, reward: reward.right,"
            " page: document.documentElement.scrollWidth}; })()"
        )
        assert box["scroll"] <= box["client"], (box, tmp_path)  # no horizontal scrollbar
        assert box["reward"] <= box["right"], box  # the reward column in view
        assert box["page"] <= WIDTH, box  # nor does the page scroll sideways
        # Drawn, not only laid out: the reward header's text is on the screenshot.
        shot = page.screenshot()
        header = page.evaluate(RECT.format(
            "Array.from(document.querySelectorAll('#list th')).filter(t => t.textContent === "
            "'reward')[0].getBoundingClientRect()"
        ))  # fmt: skip
        assert header["x"] + header["w"] <= WIDTH and ink_pixels(shot, header) > 10, header
        titles = page.evaluate(
            "Array.from(document.querySelectorAll('#list td.key > div')).map(d => d.title)"
        )
        assert titles == keys  # each whole key on hover
        rewards = page.evaluate(
            "Array.from(document.querySelectorAll('#list td.reward')).map(d => d.textContent)"
        )
        assert [float(v) for v in rewards] == [
            pytest.approx(sum(r["total_rewards"]) / len(r["total_rewards"]), abs=1e-3)
            for r in records
        ]


@pytest.mark.parametrize("env", ["search_r1", "alfworld"])
def test_each_turn_badge_starts_a_line_of_its_own(pages, env, tmp_path) -> None:
    html, records = pages[env]
    turns = len(records[0]["trajectories"][0]["transitions"])
    assert turns > 1
    with open_browser() as page:
        opened(page, html)
        geometry = page.evaluate(
            "(function () { var pre = document.querySelector('#detail details.traj pre.stream');"
            " var left = pre.getBoundingClientRect().left + parseFloat(getComputedStyle(pre).paddingLeft)"
            " + parseFloat(getComputedStyle(pre).borderLeftWidth);"
            " return Array.from(pre.querySelectorAll(':scope > .turn')).map(function (b) {"
            "   var prev = b.previousElementSibling, r = b.getBoundingClientRect();"
            "   var rects = prev ? prev.getClientRects() : [];"
            "   var above = rects.length ? rects[rects.length - 1].bottom : null;"
            "   return {text: b.textContent, left: r.left - left, top: r.top, above: above,"
            "           after: prev ? prev.className : null}; }); })()"
        )
        assert [g["text"] for g in geometry] == [f"turn {i}" for i in range(turns)]
        for badge in geometry:
            assert abs(badge["left"]) <= 1, badge  # at the start of a line
            if badge["above"] is not None:
                assert badge["top"] >= badge["above"] - 1, badge  # below what came before
        after_action = [g for g in geometry if g["after"] == "seg sampled"]
        assert len(after_action) == turns - 1  # each later turn follows an action
        # On the screenshot each badge on the first screen is drawn at the line's start.
        page.evaluate("document.querySelector('#detail details.traj pre.stream > .turn')"
                      ".scrollIntoView({block: 'start'})")  # fmt: skip
        shot = page.screenshot()
        boxes = page.evaluate(
            "Array.from(document.querySelectorAll('#detail details.traj pre.stream > .turn'))"
            ".map(b => { var r = b.getBoundingClientRect(); return {x: r.left, y: r.top,"
            " w: r.width, h: r.height}; }).filter(r => r.y >= 0 && r.y + r.h <= innerHeight)"
        )
        assert boxes, "no turn badge on screen"
        for box in boxes:
            assert colour_share(shot, box, BADGE_BG) > 0.3, box
            # Nothing of the previous action is drawn on the badge's line to its right.
            rest = {"x": box["x"] + box["w"] + 2, "y": box["y"], "w": 200, "h": box["h"]}
            assert ink_pixels(shot, rest) == 0, (box, tmp_path)
        (tmp_path / f"{env}-badges.png").write_bytes(shot)


def test_the_legend_says_the_end_of_turn_token_is_never_trained(pages) -> None:
    html, _records = pages["search_r1"]
    with open_browser() as page:
        opened(page, html)
        note = page.evaluate("document.getElementById('eot').textContent")
        assert "<|im_end|>" in note and "never trained" in note
        assert page.evaluate("document.getElementById('eot').getBoundingClientRect().bottom") < 200
        shot = page.screenshot()
        box = page.evaluate(RECT.format("document.getElementById('eot').getBoundingClientRect()"))
        assert ink_pixels(shot, box) > 50, box  # drawn on the first screen, not hidden
