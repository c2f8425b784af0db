"""The list of costly tests stays true: every entry names a test module or function that
exists, so a renamed test cannot leave a stale entry behind while its new name quietly joins
the fast loop, and every entry says why it is slow."""

from __future__ import annotations

import ast
import subprocess
import sys

from support.paths import REPO
from support.slow_tests import SLOW


def _test_functions(module: str) -> set[str]:
    tree = ast.parse((REPO / module).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            names.add(node.name)
    return names


def test_every_entry_names_an_existing_test_and_a_reason() -> None:
    stale = []
    for entry, reason in SLOW.items():
        module, _, function = entry.partition("::")
        assert reason.strip(), f"{entry}: no reason given"
        if not (REPO / module).is_file():
            stale.append(f"{entry}: no such module")
        elif function and function not in _test_functions(module):
            stale.append(f"{entry}: no test function {function!r} in {module}")
    assert not stale, "stale entries in tests/support/slow_tests.py:\n" + "\n".join(stale)


def test_the_mark_follows_the_list() -> None:
    # A listed module and a listed function get the mark, the function's other neighbours and
    # this unlisted module do not; collection only, in a fresh pytest.
    listed_module = "tests/envs/alfworld/test_alfworld_crash_reason.py"
    listed_function = "tests/rollout/collect/test_collector.py::test_killed_run_loses_nothing_and_the_rerun_resumes"
    assert listed_module in SLOW and listed_function in SLOW
    modules = [listed_module, listed_function.split("::")[0], "tests/test_slow_tests.py"]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "slow",
            "-p",
            "no:cacheprovider",
            *modules,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    collected = {line.split("[", 1)[0] for line in result.stdout.splitlines() if "::" in line}
    assert listed_function in collected, result.stdout + result.stderr
    assert any(node.startswith(listed_module + "::") for node in collected), result.stdout
    assert not any(node.startswith("tests/test_slow_tests.py") for node in collected)
    neighbours = [n for n in collected if n.startswith(listed_function.split("::")[0])]
    assert neighbours == [listed_function], neighbours
