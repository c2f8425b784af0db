"""The HTML view shows each image inline at its turn (headless Chromium)."""

from __future__ import annotations

import pytest
from support import machine_skips
from support.browser_cdp import open_browser
from support.vision_runs import collect_charts
from support.vocab import shared_vocabulary

from agentenvs.rollout.inspect.viewer import load_records, render_html
from agentenvs.rollout.policies import make_policy

pytestmark = [machine_skips.needs("chromium"), pytest.mark.services]


def test_images_are_drawn_where_their_placeholder_runs_were(tmp_path):
    store = tmp_path / "charts.jsonl"
    result = collect_charts(make_policy("scripted"), store, groups=1)
    trajectory = result.ok[0].group.trajectories[0]
    shown = [p for tr in trajectory.transitions for p in tr.images]
    distinct = list(dict.fromkeys(p.image.sha256 for p in shown))
    html = tmp_path / "charts.html"
    records = load_records(store)
    html.write_text(render_html(records, shared_vocabulary("qwen2.5"), source=str(store)))
    with open_browser() as page:
        page.navigate(html.as_uri())
        page.wait_for("document.body && document.body.dataset.ready === '1'")
        first = "document.querySelectorAll('#detail details.traj')[0]"
        drawn = page.wait_for(
            f"{first} && Array.from({first}.querySelectorAll('img.obs-image'))"
            ".map(i => [i.naturalWidth, i.naturalHeight, i.title])"
        )
        sizes = {p.image.sha256[:12]: (p.image.width, p.image.height) for p in shown}
        assert len(drawn) == len(distinct)  # each image once, at the turn that added it
        for width, height, title in drawn:
            assert sizes[title.rsplit(" ", 1)[1]] == (width, height)
        pads = page.evaluate(f"{first}.textContent.split('<|image_pad|>').length - 1")
        assert pads == 0  # the placeholder runs are drawn as their pictures
        order = page.evaluate(
            f"Array.from({first}.querySelectorAll('.turn, img.obs-image'))"
            ".map(n => n.tagName === 'IMG' ? 'img' : n.textContent)"
        )
        assert order[:2] == ["turn 0", "img"] and order[-1] == "img" and "turn 1" in order
