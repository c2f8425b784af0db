"""Generated bar charts and questions about them, drawn with Pillow.

Every chart is a function of its seed: 4 to 6 bars labelled A, B, ... with integer
values, one clearly tallest bar, each value printed in small type above its bar.
:func:`draw_chart` draws the overview the prompt shows; :func:`zoom` the enlarged
crop of one bar, where that value can be read. A question asks for one bar's value,
the tallest bar's value, or the sum of two bars', so its answer is an integer and
the reward is exact.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["value", "tallest", "sum"]
KINDS: tuple[Kind, ...] = ("value", "tallest", "sum")

BAR_WIDTH = 28
GAP = 14
MARGIN = 14
HEIGHT = 140
BASELINE = 118
PIXELS_PER_UNIT = 1.0
ZOOM_BOX = 56
ZOOM_SCALE = 2
_COLORS = (
    (66, 133, 244),
    (219, 68, 55),
    (244, 180, 0),
    (15, 157, 88),
    (171, 71, 188),
    (0, 172, 193),
)


@dataclass(frozen=True)
class Chart:
    """One chart and its question."""

    labels: tuple[str, ...]
    values: tuple[int, ...]
    kind: Kind
    asked: tuple[str, ...]
    """The bars the question names (none for ``tallest``)."""

    @property
    def tallest(self) -> str:
        return self.labels[self.values.index(max(self.values))]

    def value(self, label: str) -> int:
        return self.values[self.labels.index(label)]

    def needed(self) -> tuple[str, ...]:
        """The bars whose values answer the question (what the oracle zooms on)."""
        return (self.tallest,) if self.kind == "tallest" else self.asked

    def answer(self) -> int:
        return sum(self.value(label) for label in self.needed())

    def question(self) -> str:
        if self.kind == "value":
            return f"What is the value of bar {self.asked[0]}?"
        if self.kind == "tallest":
            return "What is the value of the tallest bar?"
        return f"What is the sum of the values of bars {self.asked[0]} and {self.asked[1]}?"


def make_chart(seed: str) -> Chart:
    """The chart and question of one seed (a task id)."""
    rng = random.Random(seed)
    count = rng.randint(4, 6)
    labels = tuple(string.ascii_uppercase[:count])
    values = [rng.randint(10, 80) for _ in range(count)]
    top = rng.randrange(count)
    values[top] = max(v for i, v in enumerate(values) if i != top) + rng.randint(6, 15)
    kind = KINDS[rng.randrange(len(KINDS))]
    asked: tuple[str, ...] = ()
    if kind == "value":
        asked = (rng.choice(labels),)
    elif kind == "sum":
        asked = tuple(sorted(rng.sample(labels, 2)))
    return Chart(labels, tuple(values), kind, asked)


def _font(size: int) -> Any:
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def _bar_box(index: int, value: int) -> tuple[int, int, int, int]:
    left = MARGIN + index * (BAR_WIDTH + GAP)
    top = BASELINE - round(value * PIXELS_PER_UNIT)
    return left, top, left + BAR_WIDTH, BASELINE


def draw_chart(chart: Chart) -> Any:
    """The overview: bars, their letters, and values in 6-pixel type above each bar."""
    from PIL import Image, ImageDraw

    width = 2 * MARGIN + len(chart.labels) * (BAR_WIDTH + GAP) - GAP
    image = Image.new("RGB", (width, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    draw.line([(MARGIN // 2, BASELINE), (width - MARGIN // 2, BASELINE)], fill="black")
    tiny, letters = _font(6), _font(11)
    for index, (label, value) in enumerate(zip(chart.labels, chart.values, strict=True)):
        box = _bar_box(index, value)
        draw.rectangle(box, fill=_COLORS[index % len(_COLORS)])
        draw.text((box[0] + 2, box[1] - 8), str(value), fill="black", font=tiny)
        draw.text((box[0] + BAR_WIDTH // 2 - 4, BASELINE + 4), label, fill="black", font=letters)
    return image


def zoom(chart: Chart, label: str) -> Any:
    """The top of one bar and its value label, cropped and enlarged (nearest neighbour,
    as a magnifier would show it)."""
    from PIL import Image

    index = chart.labels.index(label)
    left, top, right, _ = _bar_box(index, chart.value(label))
    centre_x, centre_y = (left + right) // 2, top
    box = (
        centre_x - ZOOM_BOX // 2,
        centre_y - ZOOM_BOX // 2,
        centre_x + ZOOM_BOX // 2,
        centre_y + ZOOM_BOX // 2,
    )
    crop = draw_chart(chart).crop(box)
    return crop.resize((ZOOM_BOX * ZOOM_SCALE, ZOOM_BOX * ZOOM_SCALE), Image.Resampling.NEAREST)
