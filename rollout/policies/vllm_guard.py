"""Run as ``sitecustomize`` in every Python process of a vLLM server we start: none outlives its parent.

vLLM's API server starts its engine core, which starts its model worker, each a
Python process of its own. Killed on its own (a crash, an OOM kill, ``kill -9``),
the API server leaves them running: three engine processes outlived every killed
server here, holding memory, CPUs and KV cache. So each process of the server
watches its parent; when the parent is gone (this process was re-parented), it
ends the server's whole process group (:func:`~.vllm_server.start_vllm` starts the
server in a group of its own, so nothing else is touched). The API server's own
parent is the process that started it: when that one dies, the server goes too.

Polling the parent's pid (every 0.2 s) rather than ``PR_SET_PDEATHSIG``: that signal
follows the parent *thread*, and a server started from a worker thread would be
killed when the thread ended. A process forked without a new interpreter gets its
watcher from ``os.register_at_fork``; one spawned imports this module again.

This file is copied as ``sitecustomize.py`` onto the server's ``PYTHONPATH``, so it
must import nothing but the standard library. It acts only when
``AGENTENVS_DIE_WITH_PARENT=1`` is set.
"""

from __future__ import annotations

import os
import signal
import threading
import time

ENABLED = "AGENTENVS_DIE_WITH_PARENT"
POLL_SECONDS = 0.2


def _watch(parent: int) -> None:
    while True:
        time.sleep(POLL_SECONDS)
        if os.getppid() != parent:
            try:
                os.killpg(os.getpgid(0), signal.SIGKILL)
            finally:
                os._exit(1)


def watch_parent() -> None:
    """End this process's group once its current parent is gone."""
    watcher = threading.Thread(
        target=_watch, args=(os.getppid(),), name="agentenvs-parent-watch", daemon=True
    )
    watcher.start()


if os.environ.get(ENABLED) == "1":
    watch_parent()
    os.register_at_fork(after_in_child=watch_parent)
