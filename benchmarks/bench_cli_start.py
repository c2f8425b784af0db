"""End-to-end time of ``agentenvs`` commands, the code before issue 30 against now (issue 30, item 11).

Each command runs in a fresh process, as a person types it, and is timed from
spawn to exit (wall) with the process's own CPU time beside it (user + system,
from ``wait4``; it moves less than wall time when other work shares the cores).
"Before" is a git revision (default ``HEAD``) exported with ``git archive`` into a
temporary folder and put first on ``PYTHONPATH``, so it runs on the same venv,
interleaved with "now" run by run so that both see the same machine load.

Before, the built-in tokenizer was a transformers ``PreTrainedTokenizerFast``:
the first call on a machine trained it (cold cache, what a fresh checkout or CI
sees), later calls read the cache; both imported transformers, which imports
torch. Both cases are measured (the cold one in a fresh ``AGENTENVS_CACHE``).

Targets (issue 30): ``view`` of 100 Search-R1 groups of 4 <= 2 s,
``rollout guess_number --groups 1`` <= 1.5 s. Issue 46 reran it against the
revision before its changes (``--before REV``), with ``rollout --help`` (the run
options now defined once, in groups) and ``list`` (which imported every env config).

Run: ``python benchmarks/bench_cli_start.py [--repeats 5] [--before HEAD]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLI = "from agentenvs.rollout.cli import main; main()"
TOKENIZER = "from agentenvs.rollout.tokenizer import load_tokenizer; load_tokenizer('builtin')"


@dataclass
class Timing:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def cell(self) -> str:
        if not self.wall:
            return "-"
        return f"{statistics.median(self.wall):.2f} s (cpu {statistics.median(self.cpu):.2f} s)"

    def median(self) -> float:
        return statistics.median(self.wall)


def export_tree(revision: str, folder: Path) -> Path:
    """``revision``'s package folders, importable as ``agentenvs.*`` from the returned path."""
    tree = folder / "tree"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", revision, "envs", "rollout", "sandbox"],
        capture_output=True, check=True,
    )  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    shim = folder / "path" / "agentenvs"
    shim.mkdir(parents=True)
    for part in ("envs", "rollout", "sandbox"):
        (shim / part).symlink_to(tree / part)
    return shim.parent


def run(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one process, which must succeed."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        args, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    errors = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {proc.returncode}: {errors.decode()[-800:]}")
    return wall, usage.ru_utime + usage.ru_stime


def import_seconds(env: dict[str, str], cwd: Path) -> float:
    """-X importtime's total for loading the built-in tokenizer (top-level imports)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", TOKENIZER],
        env=env, cwd=cwd, capture_output=True, text=True, check=True,
    )  # fmt: skip
    total = 0
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "cumulative" not in line:
            _self, cumulative, name = line.removeprefix("import time:").split("|")
            if not name.startswith("  "):
                total += int(cumulative)
    return total / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--before", default="HEAD", help="git revision measured as 'before'")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        base["AGENTENVS_CACHE"] = str(work / "cache")  # before: trained once, then cached
        trees = {
            "now": dict(base),
            "before": {**base, "PYTHONPATH": str(export_tree(args.before, work))},
        }
        python = [sys.executable, "-c", CLI]
        store = work / "search_r1.jsonl"
        run([*python, "rollout", "search_r1", "--groups", "100", "--group-size", "4",
             "--out", str(store), "--no-progress"], trees["now"], work)  # fmt: skip
        run([*python, "view", str(store), "--html", str(work / "warm.html")], trees["before"], work)
        commands = {
            "`agentenvs view` 100 Search-R1 groups x 4 `--html`": lambda n: [
                "view", str(store), "--html", str(work / f"v{n}.html")],
            "`agentenvs view` same store, terminal, piped, `--limit 10`": lambda n: [
                "view", str(store), "--no-pager", "--limit", "10"],
            "`agentenvs rollout guess_number --groups 1`": lambda n: [
                "rollout", "guess_number", "--groups", "1", "--out", str(work / f"g{n}.jsonl"),
                "--no-progress"],
            "`agentenvs --help`": lambda n: ["--help"],
            "`agentenvs rollout --help`": lambda n: ["rollout", "--help"],
            "`agentenvs list --json`": lambda n: ["list", "--json"],
        }  # fmt: skip
        no_tokenizer = {
            "`agentenvs --help`",
            "`agentenvs rollout --help`",
            "`agentenvs list --json`",
        }
        results: dict[tuple[str, str], Timing] = {}
        counter = 0
        for repeat in range(args.repeats):
            for name, argv in commands.items():
                order = ("now", "before") if repeat % 2 == 0 else ("before", "now")
                for tree in order:
                    counter += 1
                    wall, cpu = run([*python, *argv(counter)], trees[tree], work)
                    timing = results.setdefault((name, tree), Timing())
                    timing.wall.append(wall)
                    timing.cpu.append(cpu)
                # Before, in a fresh cache: the tokenizer is trained first.
                cold = {**trees["before"], "AGENTENVS_CACHE": str(work / f"cold{counter}")}
                if name not in no_tokenizer:
                    counter += 1
                    wall, cpu = run([*python, *argv(counter)], cold, work)
                    timing = results.setdefault((name, "cold"), Timing())
                    timing.wall.append(wall)
                    timing.cpu.append(cpu)
        imports = {tree: import_seconds(env, work) for tree, env in trees.items()}

    load = os.getloadavg()
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
          f"load {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min) at the end; "
          f"median of {args.repeats}")  # fmt: skip
    print("| command | before, tokenizer cached | before, first run (cold cache) | now | "
          "before / now |")  # fmt: skip
    print("|---|---|---|---|---|")
    for name in commands:
        now, before = results[(name, "now")], results[(name, "before")]
        cold = results.get((name, "cold"), Timing())
        print(f"| {name} | {before.cell()} | {cold.cell()} | {now.cell()} | "
              f"{before.median() / now.median():.1f}x |")  # fmt: skip
    print(f"| imports to load the built-in tokenizer (`-X importtime`) | {imports['before']:.2f} s "
          f"| | {imports['now']:.2f} s | {imports['before'] / imports['now']:.1f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
