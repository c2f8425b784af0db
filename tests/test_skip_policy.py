"""The skip policy (tests/support/skip_policy.py): a skip the list does not allow fails the run.

Each case runs pytest for real, in a subprocess, on a few test files in a temporary
directory whose conftest installs the policy exactly as tests/conftest.py does. Two
conditions are added to the list there, one the machine lacks and one it offers by
construction, so the outcome does not depend on what this machine has. The probes
themselves are checked against this machine at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import machine_skips
from support.paths import TESTS

CONFTEST = f"""
import sys

sys.path.insert(0, {str(TESTS)!r})
from support import machine_skips, skip_policy

for name, said in (("lacking-on-purpose", "absent by construction"), ("offered-on-purpose", None)):
    machine_skips.CONDITIONS[name] = machine_skips.Condition(
        name, f"a condition this machine has or lacks by construction", lambda said=said: said
    )


def pytest_configure(config):
    skip_policy.install(config)
"""


def run_pytest(tmp_path: Path, files: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    services: a real service\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for name, body in files.items():
        (tmp_path / name).write_text(textwrap.dedent(body))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def not_allowed(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("NOT ALLOWED: ")]


def test_an_unlisted_skip_fails_a_run_whose_tests_all_passed(tmp_path: Path) -> None:
    done = run_pytest(
        tmp_path,
        {
            "test_a.py": """
            import pytest

            def test_passes():
                pass

            def test_skips_on_our_own_error():
                try:
                    raise RuntimeError("the image builder failed")
                except RuntimeError as exc:
                    pytest.skip(f"cannot run here: {exc}")
            """
        },
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed, 1 skipped" in done.stdout
    assert skip_section_of(done.stdout)
    (line,) = not_allowed(done.stdout)
    assert "test_a.py::test_skips_on_our_own_error" in line
    assert "cannot run here: the image builder failed" in line and "no machine-skip" in line
    assert "1 skip(s) not in the allowed list: the run fails" in done.stdout


def test_a_listed_machine_condition_the_machine_lacks_is_allowed_and_reported(
    tmp_path: Path,
) -> None:
    done = run_pytest(
        tmp_path,
        {
            "test_b.py": """
            import pytest
            from support import machine_skips

            def test_passes():
                pass

            @machine_skips.needs("lacking-on-purpose")
            def test_marked():
                raise AssertionError("never runs")

            @pytest.fixture
            def needs_it():
                machine_skips.require("offered-on-purpose", "lacking-on-purpose")

            def test_in_a_fixture(needs_it):
                raise AssertionError("never runs")
            """
        },
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 2 skipped" in done.stdout
    assert not not_allowed(done.stdout)
    assert (
        "allowed: 2 skipped, machine-skip[lacking-on-purpose]: a condition this machine has "
        "or lacks by construction (absent by construction)"
    ) in skip_section_of(done.stdout)
    # -rfEs lists each skip with its reason in the short summary too
    assert done.stdout.count("SKIPPED [1] test_b.py") == 2


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (  # a tag copied onto a skip, for a condition the machine has
            'pytest.skip("machine-skip[offered-on-purpose]: pretend")',
            "the machine offers 'offered-on-purpose'",
        ),
        ('pytest.skip("machine-skip[telepathy]: no such thing")', "'telepathy' is not a listed"),
        ('pytest.importorskip("no_such_module_anywhere")', "no machine-skip"),
        ('pytest.xfail("a known bug")', "no machine-skip"),
    ],
    ids=["forged-tag", "unknown-condition", "importorskip", "xfail"],
)
def test_other_skips_fail_the_run(tmp_path: Path, body: str, why: str) -> None:
    done = run_pytest(tmp_path, {"test_c.py": f"import pytest\n\ndef test_it():\n    {body}\n"})
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = not_allowed(done.stdout)
    assert "test_c.py::test_it" in line and why in line, line


def test_skips_at_collection_and_skipif_marks_count_too(tmp_path: Path) -> None:
    done = run_pytest(
        tmp_path,
        {
            "test_module_level.py": """
            import pytest

            pytest.skip("whole module", allow_module_level=True)
            """,
            "test_mark.py": """
            import pytest

            @pytest.mark.skipif(True, reason="a condition of our own")
            def test_it():
                pass
            """,
        },
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = not_allowed(done.stdout)
    assert len(lines) == 2, done.stdout
    assert any("test_module_level.py" in line and "whole module" in line for line in lines)
    assert any(
        "test_mark.py::test_it" in line and "a condition of our own" in line for line in lines
    )


def test_deselected_tests_are_not_skips_and_failures_stay_failures(tmp_path: Path) -> None:
    files = {
        "test_d.py": """
        import pytest

        @pytest.mark.services
        def test_deselected_by_test_fast():
            pytest.skip("would not be allowed")

        def test_passes():
            pass
        """
    }
    fast = run_pytest(tmp_path, files, "-m", "not services")
    assert fast.returncode == 0, fast.stdout + fast.stderr
    assert "1 passed, 1 deselected" in fast.stdout and "NOT ALLOWED" not in fast.stdout
    failing = run_pytest(tmp_path, {"test_d.py": "def test_fails():\n    assert False\n"})
    assert failing.returncode == 1 and "1 failed" in failing.stdout
    assert skip_section_of(failing.stdout) == ""  # no skips, no section


def skip_section_of(out: str) -> str:
    marker = "skips (allowed: tests/support/machine_skips.py)"
    if marker not in out:
        return ""
    return out.split(marker, 1)[1]


# ----------------------------------------------------------------------------- the list


def test_every_listed_condition_asks_the_machine_and_tags_its_skip() -> None:
    assert machine_skips.CONDITIONS, "the list of allowed skips is empty"
    for name, condition in machine_skips.CONDITIONS.items():
        said = machine_skips.probe(name)
        assert said is None or (isinstance(said, str) and said), (name, said)
        reason = machine_skips.skip_reason(name)
        if said is None:
            assert reason is None and machine_skips.offers(name)
        else:
            assert reason is not None and machine_skips.condition_of(reason) == name
            assert condition.reason in reason and said in reason
    for group in (machine_skips.LOCAL_SANDBOX, machine_skips.DOCKER_SANDBOX):
        assert set(group) <= set(machine_skips.CONDITIONS)
    assert set(machine_skips.LAYER_CONDITIONS.values()) <= set(machine_skips.CONDITIONS)
    with pytest.raises(KeyError, match="not listed"):
        machine_skips.needs("no-such-condition")


def test_a_probe_tells_the_machine_refusing_from_its_own_crash() -> None:
    assert machine_skips._run_python("pass") is None
    assert machine_skips._run_python("no('the kernel said EPERM')") == "the kernel said EPERM"
    # as root, the probes' switch to an unprivileged uid really happens
    assert machine_skips._run_python(machine_skips._DROP_TO_NOBODY + "no(str(os.getuid()))") == (
        str(machine_skips.UNPRIVILEGED_UID) if os.geteuid() == 0 else str(os.getuid())
    )
    with pytest.raises(machine_skips.ProbeError, match="ZeroDivisionError"):
        machine_skips._run_python("1 / 0")  # a bug of the probe: an error, never a skip
