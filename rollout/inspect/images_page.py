"""The viewer's images: each distinct picture once in the page, drawn at its turn.

A span that shows images lists them as (first token, placeholder count, index);
the page carries each picture once, as a PNG data URL read from beside the store
(the page stays self-contained). The script draws the picture where its placeholder
run starts and leaves the run's tokens out of the stream (their ids are still on
the picture's tooltip). A picture not on disk is drawn as a labelled gap, so a page
of a store whose image folder was not copied still opens.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

from agentenvs.envs.vision.images import ImageError
from agentenvs.rollout.collect.image_files import ImageFiles


def image_sources(hashes: Sequence[str], source: str) -> list[dict[str, str]]:
    """Per pixel hash: its data URL (or ``""`` when the store's folder lacks it)."""
    files = ImageFiles(source) if source else None
    out = []
    for sha in hashes:
        url = ""
        if files is not None:
            try:
                url = "data:image/png;base64," + base64.b64encode(files.read(sha)).decode("ascii")
            except ImageError:
                url = ""
        out.append({"sha256": sha, "src": url})
    return out
