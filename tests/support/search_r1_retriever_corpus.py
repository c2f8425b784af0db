"""A small corpus written for the lucene/dense retriever tests, in Search-R1 layout.

Each passage has a distinctive subject so a pointed query has one right answer; the
QUERIES map paraphrased questions (for dense) and keyword queries (for BM25) to it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

PASSAGES: list[tuple[str, str, str]] = [
    (
        "p-lighthouse",
        "Corran Point Lighthouse",
        "The lighthouse at Corran Point was lit in 1871 and guided herring boats past the reef until an automatic lamp replaced its keepers.",
    ),
    (
        "p-volcano",
        "Mount Teskar",
        "Mount Teskar is a dormant volcano whose last eruption buried the valley villages in grey ash; hot springs still bubble on its flanks.",
    ),
    (
        "p-bakery",
        "Halden Bakery",
        "Halden Bakery bakes rye loaves in a wood-fired oven every morning and sells cinnamon buns to the market traders at dawn.",
    ),
    (
        "p-violin",
        "Ingrid Solvay",
        "Ingrid Solvay was a violinist who premiered three concertos and taught at the conservatory for forty years.",
    ),
    (
        "p-glacier",
        "Vatna Glacier",
        "The Vatna glacier retreats about forty metres each summer, leaving a lake of meltwater at its snout.",
    ),
    (
        "p-railway",
        "Northern Coast Railway",
        "The Northern Coast Railway links the fishing ports with a single track line; steam engines ran it until 1968.",
    ),
    (
        "p-beetle",
        "Copper Stag Beetle",
        "The copper stag beetle lives in rotting oak stumps, and the males fight with their oversized jaws in early summer.",
    ),
    (
        "p-chess",
        "Marta Quill",
        "Marta Quill won the national chess championship at sixteen with a daring queen sacrifice in the final round.",
    ),
    (
        "p-bridge",
        "Ostra Suspension Bridge",
        "The Ostra suspension bridge spans the river gorge on two steel cables and opened to carriages in 1902.",
    ),
    (
        "p-honey",
        "Heather Honey",
        "Beekeepers move their hives onto the moors in August so the bees gather nectar from flowering heather, giving a dark, thick honey.",
    ),
    (
        "p-observatory",
        "Kessel Observatory",
        "Kessel Observatory houses a refracting telescope used to discover two comets and to map the craters of the moon.",
    ),
    (
        "p-wool",
        "Lindvik Wool Mill",
        "The Lindvik mill spins sheep wool into yarn with water-powered looms beside the waterfall.",
    ),
    (
        "p-football",
        "Rovers Football Club",
        "Rovers Football Club plays home matches at Cliffside Park and won the regional cup five times.",
    ),
    (
        "p-salt",
        "Saltmarsh Pans",
        "Salt is harvested from shallow evaporation pans on the marsh, raked by hand when the summer sun dries the brine.",
    ),
    (
        "p-library",
        "Ferrant Library",
        "The Ferrant library holds rare maps and medieval manuscripts in a reading room lit by tall arched windows.",
    ),
    (
        "p-storm",
        "Great Gale of 1839",
        "The great gale of 1839 wrecked forty ships along the coast and flooded the harbour warehouses overnight.",
    ),
]

# Keyword queries: distinctive terms of one passage, with an inflection the Porter
# stemmer has to undo ("lighthouses" -> lighthous, "comets" -> comet).
KEYWORD_QUERIES: dict[str, str] = {
    "Corran lighthouses herring reef": "p-lighthouse",
    "Teskar volcano eruption ash": "p-volcano",
    "rye loaves cinnamon buns": "p-bakery",
    "violinist concertos conservatory": "p-violin",
    "Vatna glacier meltwater": "p-glacier",
    "queen sacrifice chess championship": "p-chess",
    "telescope comets craters": "p-observatory",
    "evaporation pans brine marsh": "p-salt",
}

# Paraphrased questions with few shared words, for the dense retriever.
SEMANTIC_QUERIES: dict[str, str] = {
    "Which insect with big mandibles lives in dead trees?": "p-beetle",
    "Where can I buy fresh bread in the early morning?": "p-bakery",
    "What mountain could erupt again and has thermal pools?": "p-volcano",
    "Which musician taught students for decades?": "p-violin",
    "What storm destroyed many vessels near the shore?": "p-storm",
    "Where are old books and historic charts kept?": "p-library",
    "How do bees make dark honey from moorland flowers?": "p-honey",
    "Which soccer team won a county trophy?": "p-football",
}


def contents_of(passage_id: str) -> str:
    for pid, title, text in PASSAGES:
        if pid == passage_id:
            return f'"{title}"\n{text}'
    raise KeyError(passage_id)


def write_corpus(path: Path) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for pid, title, text in PASSAGES:
            handle.write(json.dumps({"id": pid, "contents": f'"{title}"\n{text}'}) + "\n")
    return path


def build_index_checked(build: Callable[..., Path], corpus: Path, out: Path) -> Path:
    """Build with a retriever's ``build_index`` and check its return and progress reports.

    Why: every retriever's builder shares this contract: it returns ``out`` and its
    progress callback counts every passage exactly once.
    """
    reported: list[int] = []
    assert build(corpus, out, progress=reported.append) == out
    assert sum(reported) == len(PASSAGES)
    return out
