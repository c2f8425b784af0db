"""Weight sync: what each path costs, and its share of one asynchronous RL step.

Runs ``examples/grpo_vllm.py`` once per path (``lora``: load an adapter under a
new name; ``full``: an in-place reload), each with its own vLLM server from
``.venv-vllm``, and reads the per-step lines it prints: load, prefix-cache
reset and probe verification seconds, the whole push, and the step's wall time
(collection of the step's groups overlapped with training, then the push).
Both paths run in the same invocation, one after the other, on the same
machine state, so their ratio is the comparison.

Run: ``python benchmarks/bench_vllm_sync.py [--steps 6]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "grpo_vllm.py"
FIELDS = ("load_s", "reset_s", "verify_s", "total_s", "step_s")


def run_path(path: str, steps: int, out: Path) -> dict[str, float]:
    command = [sys.executable, str(EXAMPLE), "--sync", path, "--steps", str(steps)]
    command += ["--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{path}: the example failed:\n{done.stderr[-2000:]}")
    steps_out = [
        json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"step"')
    ]
    row = {name: statistics.median(s[name] for s in steps_out) for name in FIELDS}
    row["share"] = row["total_s"] / row["step_s"]
    row["verified"] = sum(1 for s in steps_out if s["verified"])
    row["steps"] = len(steps_out)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in ("lora", "full"):
            rows[path] = run_path(path, args.steps, Path(tmp) / path)
            print(path, rows[path], flush=True)
    print(
        f"\nmachine: {platform.machine()}, python {platform.python_version()}; medians over steps"
    )
    print(
        "| path | load s | reset s | verify s | push s | step s | push share of step | verified |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for path, r in rows.items():
        print(
            f"| {path} | {r['load_s']:.3f} | {r['reset_s']:.3f} | {r['verify_s']:.3f} | "
            f"{r['total_s']:.3f} | {r['step_s']:.2f} | {100 * r['share']:.1f}% | "
            f"{r['verified']}/{r['steps']} |"
        )


if __name__ == "__main__":
    main()
