"""Run the agentenvs CLI as if some modules were not installed, without uninstalling them.

``python tests/support/hide_modules.py MOD[,MOD...] ARGS...`` puts a finder first on
``sys.meta_path`` that refuses the named top-level modules (an import raises
``ModuleNotFoundError``, ``importlib.util.find_spec`` does too), then runs
``agentenvs ARGS...`` in this process. What a machine without an extra sees.
"""

from __future__ import annotations

import sys
from importlib.abc import MetaPathFinder

HIDDEN = frozenset(sys.argv[1].split(",")) if __name__ == "__main__" else frozenset()


class Hide(MetaPathFinder):
    """Refuses every module whose top-level package is hidden."""

    def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


if __name__ == "__main__":
    sys.meta_path.insert(0, Hide())
    sys.argv = ["agentenvs", *sys.argv[2:]]
    from agentenvs.rollout.cli import main

    main()
