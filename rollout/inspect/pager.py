"""The pager ``agentenvs view`` prints through: ``$PAGER``, else ``less``, else ``more``.

The terminal view marks sampled and masked tokens with colour, which reaches the
pager as ANSI escape codes. ``less`` shows them as raw text (``ESC[1;36m``)
unless it runs with ``-R``, and Debian sets no ``LESS``; rich's own pager goes
through ``pydoc``, which sets nothing either. So, as git does, ``LESS=FRX`` is
set for the pager when ``LESS`` is unset (``R``: pass colours through; ``F``:
quit when the text fits one screen; ``X``: leave the text on the screen after
quitting), and ``LV=-c`` for ``lv``. A ``LESS`` the user set is left alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping

from rich.pager import Pager

DEFAULT_LESS = "FRX"


def pager_command(environ: Mapping[str, str]) -> str | None:
    """The command to page with; ``None`` to print directly (``PAGER`` empty or ``cat``,
    or no pager installed)."""
    chosen = environ.get("PAGER")
    if chosen is not None:
        chosen = chosen.strip()
        return None if chosen in ("", "cat") else chosen
    for name in ("less", "more"):
        if shutil.which(name, path=environ.get("PATH")):
            return name
    return None


def pager_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The pager's environment: ``environ`` with git's defaults where unset."""
    env = dict(environ)
    env.setdefault("LESS", DEFAULT_LESS)
    env.setdefault("LV", "-c")
    return env


class ColourPager(Pager):
    """Pipes the text (with its escape codes) into the pager, run as the shell would."""

    def show(self, content: str) -> None:
        command = pager_command(os.environ)
        if command is None:
            sys.stdout.write(content)
            sys.stdout.flush()
            return
        encoding = sys.stdout.encoding or "utf-8"
        proc = subprocess.Popen(
            command, shell=True, stdin=subprocess.PIPE, env=pager_environment(os.environ)
        )
        assert proc.stdin is not None
        try:
            proc.stdin.write(content.encode(encoding, errors="replace"))
            proc.stdin.close()
        except BrokenPipeError:  # the reader quit before the end: nothing more to show
            pass
        while True:
            try:
                proc.wait()
                return
            except KeyboardInterrupt:  # Ctrl-C belongs to the pager (less uses it), as in pydoc
                continue
