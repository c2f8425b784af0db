"""A separately installed package registers an environment and agentenvs finds it.

The example package in tests/plugin_example is pip-installed into a temporary
directory (a copy, so the repository is not written to). Subprocesses with that
directory on PYTHONPATH then see the environment through the entry-point group,
``agentenvs list``, ``gymnasium.make`` and a full ``agentenvs rollout``; the same
commands without it do not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import SUPPORT

PLUGIN_SOURCE = SUPPORT / "plugin_example"
AGENTENVS = Path(sys.executable).parent / "agentenvs"


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("plugin")
    source = work / "src"
    shutil.copytree(PLUGIN_SOURCE, source)
    site = work / "site"
    subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
            "--no-build-isolation", "--no-index", "--target", str(site), str(source),
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )  # fmt: skip
    assert (site / "agentenvs_reverse_word.py").exists()
    return site


def _run(args: list[str], site: Path | None, cwd: Path, timeout: float = 120):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return subprocess.run(
        args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_cli_lists_the_plugin_only_when_installed(plugin_site, tmp_path) -> None:
    with_plugin = _run([str(AGENTENVS), "list", "--json"], plugin_site, tmp_path)
    assert with_plugin.returncode == 0, with_plugin.stderr
    rows = {row["name"]: row for row in json.loads(with_plugin.stdout)}
    assert rows["reverse_word"] == {
        "name": "reverse_word",
        "gym_id": "agentenvs/ReverseWord-v0",
        "entry_point": "agentenvs_reverse_word:ReverseWordConfig",
        "description": "Spell a word backwards; one try per turn, with feedback.",
        "available": True,
        "error": None,
        "presets": [],
        "missing": [],
        "install": None,
    }
    without = _run([str(AGENTENVS), "list", "--json"], None, tmp_path)
    assert without.returncode == 0, without.stderr
    assert "reverse_word" not in {row["name"] for row in json.loads(without.stdout)}
    assert "guess_number" in {row["name"] for row in json.loads(without.stdout)}


GYM_SCRIPT = """
import json
import gymnasium
import agentenvs.envs as envs

names = [info.name for info in envs.list_envs()]
config = envs.make("reverse_word", words=["token"])
env = gymnasium.make("agentenvs/ReverseWord-v0", words=["token"])
obs, info = env.reset(seed=0)
wrong = env.step("<answer>token</answer>")
right = env.step("<answer>nekot</answer>")
print(json.dumps({
    "names": names,
    "config": type(config).__module__,
    "obs": obs,
    "wrong": list(wrong[1:4]),
    "right": list(right[1:4]),
}))
"""


def test_library_and_gymnasium_find_the_plugin(plugin_site, tmp_path) -> None:
    done = _run([sys.executable, "-c", GYM_SCRIPT], plugin_site, tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "reverse_word" in result["names"]
    assert result["config"] == "agentenvs_reverse_word"
    assert "'token' backwards" in result["obs"]
    assert result["wrong"] == [0.0, False, False]
    assert result["right"] == [1.0, True, False]


def test_rollout_of_the_plugin_through_the_cli(plugin_site, tmp_path) -> None:
    out = tmp_path / "reverse.jsonl"
    args = [str(AGENTENVS), "rollout", "reverse_word", "--groups", "3", "--group-size", "2"]
    args += ["--out", str(out), "--json-summary", "--no-progress"]
    done = _run(args, plugin_site, tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["groups"], summary["trajectories"], summary["failed"]) == (3, 6, 0)
    assert summary["mean_reward"] == 1.0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["env"] for r in records] == ["reverse_word"] * 3

    unknown = _run(args, None, tmp_path)
    assert unknown.returncode == 2
    assert "unknown environment 'reverse_word'" in unknown.stderr
    assert "Traceback" not in unknown.stderr
