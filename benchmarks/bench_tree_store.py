"""Tree stores: bytes on disk with leaves stored whole vs by reference to their parent.

    python benchmarks/bench_tree_store.py [--env alfworld --env retool] [--groups 4]
        [--branch-factor 4] [--branch-at 1,2] [--repeats 5] [--set history=full]

For each env, one real tree run through the CLI (scripted policy, builtin tokenizer,
``--branch-factor K --branch-at T,T``) writes its store. The same records are then
written both ways into two files side by side: every leaf whole (format 1, the
store before issue 16's records part) and each leaf by reference (format 2). The
script prints the bytes of each, their ratio, and the time to read each file back
(``read_store``, interleaved repeat by repeat so machine noise hits both), and
asserts the two read back to the same trajectories.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import read_store

CLI = Path(sys.executable).with_name("agentenvs")


def run_tree(env: str, out: Path, args: argparse.Namespace) -> dict:
    command = [
        str(CLI), "rollout", env, "--groups", str(args.groups), "--group-size", "1",
        "--branch-factor", str(args.branch_factor), "--branch-at", args.branch_at,
        "--out", str(out), "--json-summary", "--no-progress", "--concurrency", "2",
    ]  # fmt: skip
    for setting in args.set or []:
        command += ["--set", setting]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def write(records: list[GroupRecord], path: Path, *, share: bool) -> int:
    lines = (json.dumps(r.to_json(share_prefixes=share), separators=(",", ":")) for r in records)
    path.write_text("".join(line + "\n" for line in lines))
    return path.stat().st_size


def trajectory_bytes(records: list[GroupRecord], *, share: bool) -> int:
    """The bytes of the trajectories alone (the rest of a record is the same both ways)."""
    return sum(
        len(json.dumps(r.to_json(share_prefixes=share)["trajectories"], separators=(",", ":")))
        for r in records
    )


def same_tokens(a: Path, b: Path) -> bool:
    def flat(path: Path) -> list:
        return [
            [(t.ob, t.ac.tokens, t.ac.logprobs, t.reward) for t in traj.transitions]
            for r in read_store(path).records
            for traj in r.group.trajectories
        ]

    return flat(a) == flat(b)


def measure(env: str, folder: Path, args: argparse.Namespace) -> dict:
    store = folder / f"{env}.jsonl"
    summary = run_tree(env, store, args)
    records = read_store(store).records
    whole, shared = folder / f"{env}.whole.jsonl", folder / f"{env}.shared.jsonl"
    whole_bytes = write(records, whole, share=False)
    shared_bytes = write(records, shared, share=True)
    assert same_tokens(whole, shared), "the two forms read back differently"
    reads: dict[str, list[float]] = {"whole": [], "shared": []}
    for _ in range(args.repeats):
        for name, path in (("whole", whole), ("shared", shared)):
            start = time.perf_counter()
            read_store(path)
            reads[name].append(time.perf_counter() - start)
    leaves = summary["leaves"]
    return {
        "env": env,
        "groups": summary["groups"],
        "leaves": leaves,
        "mean_turns": summary.get("mean_turns"),
        "whole_bytes": whole_bytes,
        "shared_bytes": shared_bytes,
        "whole_bytes_per_leaf": round(whole_bytes / leaves),
        "shared_bytes_per_leaf": round(shared_bytes / leaves),
        "size_ratio": round(whole_bytes / shared_bytes, 2),
        "trajectories_ratio": round(
            trajectory_bytes(records, share=False) / trajectory_bytes(records, share=True), 2
        ),
        "read_whole_ms": round(1000 * statistics.median(reads["whole"]), 2),
        "read_shared_ms": round(1000 * statistics.median(reads["shared"]), 2),
        "read_ratio": round(
            statistics.median(reads["whole"]) / statistics.median(reads["shared"]), 2
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", action="append", default=None)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--branch-factor", type=int, default=4)
    parser.add_argument("--branch-at", default="1,2")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--set", action="append", help="env config KEY=VALUE, as for the CLI")
    args = parser.parse_args()
    print(f"# {platform.node()} {platform.machine()} python {platform.python_version()}")
    print(f"# K={args.branch_factor} at turns {args.branch_at}, {args.groups} trees per env")
    if args.set:
        print(f"# env settings: {' '.join(args.set)}")
    with tempfile.TemporaryDirectory() as tmp:
        for env in args.env or ["alfworld", "retool"]:
            print(json.dumps(measure(env, Path(tmp), args)), flush=True)


if __name__ == "__main__":
    main()
