"""Import cost of each public face, each in a fresh interpreter (issue 22).

Prints, per statement, the cumulative ``-X importtime`` of the statement's top module
(median of ``--repeats`` fresh processes) and the number of modules it loads, so the
lazy faces can be compared with what loading every registered environment costs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

STATEMENTS = {
    "import agentenvs.envs.types": "the interface",
    "import agentenvs.envs": "the envs face",
    "import agentenvs.rollout": "the rollout face",
    "import agentenvs.sandbox": "the sandbox face",
    "from agentenvs.envs import make; make('guess_number')": "one environment",
    "from agentenvs.envs import list_envs; list_envs()": "every registered environment",
}

COUNT = "import sys; before = set(sys.modules); {stmt}; print(len(set(sys.modules) - before))"


def import_seconds(statement: str) -> float:
    """Wall time of the statement in a fresh interpreter, from -X importtime's totals."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    total = 0
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self, cumulative, name = line.removeprefix("import time:").split("|")
        if not name.startswith("  "):  # a top-level import: its cumulative counts once
            total += int(cumulative)
    return total / 1e6


def modules_loaded(statement: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", COUNT.format(stmt=statement)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("| statement | what | import s (median) | modules loaded |")
    print("|---|---|---|---|")
    for statement, what in STATEMENTS.items():
        seconds = statistics.median(import_seconds(statement) for _ in range(args.repeats))
        print(f"| `{statement}` | {what} | {seconds:.3f} | {modules_loaded(statement)} |")


if __name__ == "__main__":
    main()
