"""How a command ends: within a bound, with one line per problem (issue #46)."""

from __future__ import annotations

from conftest import run_cli

HANG = 120.0
"""Seconds after which the command counts as hung (a failure, not a measurement)."""


def test_rollout_retool_without_its_extra_exits(tmp_path):
    """The reported hang (6 of 19 runs): ``math_verify`` (the ``retool`` extra) cannot
    be imported, both groups fail, and the command exits with one error line instead
    of waiting forever for a sandbox worker that was being started."""
    missing = tmp_path / "no-extra" / "math_verify"
    missing.mkdir(parents=True)
    (missing / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'math_verify'\", name='math_verify')\n"
    )
    ran = run_cli(
        ["rollout", "retool", "--groups", "2", "--group-size", "2", "--json-summary",
         "--out", tmp_path / "r.jsonl"],
        tmp_path, site=missing.parent, timeout=HANG,
    )  # fmt: skip
    assert ran.code == 1, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "No module named 'math_verify'" in lines[0], ran.stderr
