"""Where the repository, the tests and their helpers live, for tests that run files."""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
REPO = TESTS.parent
EXAMPLES = REPO / "examples"
