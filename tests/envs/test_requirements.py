"""Missing extras are found before running (issue 46): ``agentenvs list`` says what an
environment lacks and which extra brings it; ``agentenvs rollout`` refuses before it
collects anything. A module is hidden by a finder in a subprocess
(``tests/support/hide_modules.py``), as on a machine without the extra."""

from __future__ import annotations

import json
import subprocess
import sys

from support.paths import SUPPORT

from agentenvs.envs.registry import make
from agentenvs.envs.requirements import MissingRequirements, Requirement, check_installed, extra

HIDE = str(SUPPORT / "hide_modules.py")


def agentenvs_without(modules: str, *args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, HIDE, modules, *args], capture_output=True,
                          text=True, timeout=180, cwd=cwd)  # fmt: skip


def test_list_says_what_is_missing_and_which_extra_brings_it() -> None:
    """Before: every env said ``available: true`` whatever was installed."""
    listed = agentenvs_without("math_verify,mcp", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    retool, tools = rows["retool"], rows["mcp_tools"]
    assert not retool["available"] and retool["missing"] == ["math_verify"]
    assert retool["install"] == "pip install 'agentenvs[retool]'"
    assert "needs math_verify" in retool["error"] and retool["gym_id"] == "agentenvs/ReTool-v0"
    assert not tools["available"] and tools["install"] == "pip install 'agentenvs[mcp]'"
    assert rows["guess_number"]["available"] and rows["guess_number"]["missing"] == []
    assert rows["search_r1"]["available"]


def test_rollout_refuses_before_collecting_naming_the_install_line(tmp_path) -> None:
    """Before: both groups failed with ``ModuleNotFoundError: math_verify`` and no hint."""
    out = tmp_path / "retool.jsonl"
    ran = agentenvs_without("math_verify", "rollout", "retool", "--groups", "2",
                            "--group-size", "1", "--out", str(out), cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert ("error: environment 'retool' needs math_verify, which is not installed: "
            "pip install 'agentenvs[retool]'") in ran.stderr  # fmt: skip
    assert not out.exists()  # nothing was collected


def test_a_setting_that_needs_other_modules_says_so() -> None:
    assert make("search_r1").requirements() == extra("search", "bm25s", "Stemmer")
    http = make("search_r1", retriever={"kind": "http", "url": "http://127.0.0.1:9/retrieve"})
    assert http.requirements() == ()  # a remote index needs no index library here
    assert make("retool", grader="strict_box").requirements() == ()
    docker = make("retool", sandbox={"backend": "docker"}).requirements()
    assert Requirement("docker", "agentenvs[docker]") in docker


def test_check_installed_names_every_missing_module_once_per_install() -> None:
    absent = [Requirement("no_such_module_a", "agentenvs[x]"),
              Requirement("no_such_module_b", "agentenvs[x]"), Requirement("json", "core")]  # fmt: skip
    try:
        check_installed("demo", absent)
    except MissingRequirements as error:
        assert error.missing == absent[:2]
        assert str(error) == ("environment 'demo' needs no_such_module_a, no_such_module_b, "
                              "which are not installed: pip install 'agentenvs[x]'")  # fmt: skip
        assert isinstance(error, ModuleNotFoundError)
    else:
        raise AssertionError("missing modules were not reported")
