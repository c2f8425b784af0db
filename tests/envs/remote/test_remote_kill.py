"""Killing the env server mid-collection: the groups already stored stay, the others
fail with a reason that names the server, and a restarted server plus a rerun
resumes to the records an in-process run makes."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from support.env_servers import ProcessServer

from agentenvs.envs.registry import make
from agentenvs.envs.remote import RemoteDataset
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.inspect.check import check_file
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.tokenizer import load_tokenizer

pytestmark = pytest.mark.services

GROUPS, GROUP_SIZE = 40, 2


def _run(builders, store):
    return asyncio.run(
        collect(
            builders,
            make_policy("scripted"),
            CollectOptions(concurrency=2, progress=False),
            store=store,
        )
    )


def _stored(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_killed_server_loses_no_stored_group_and_a_rerun_resumes(tmp_path):
    builtin = load_tokenizer("builtin")
    server = ProcessServer(["guess_number"], log=tmp_path / "serve.log").start()
    path = tmp_path / "run.jsonl"
    try:
        dataset = RemoteDataset.open(server.url, "guess_number", group_size=GROUP_SIZE,
                                     n_groups=GROUPS, tokenizer=builtin, call_retries=0)  # fmt: skip
        outcome = {}
        worker = threading.Thread(
            target=lambda: outcome.setdefault(
                "result", _run(dataset.builders, TrajectoryStore(path))
            )
        )
        worker.start()
        deadline = time.monotonic() + 60
        while len(_stored(path)) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        before = path.read_text().splitlines()
        server.kill()
        worker.join(timeout=120)
        result = outcome["result"]
        after = path.read_text().splitlines()
        assert after[: len(before)] == before  # nothing stored was lost or rewritten
        assert len(result.ok) >= len([line for line in before if '"status": "ok"' in line])
        assert result.failed, "the kill came after the last group"
        assert len(result.ok) + len(result.failed) == GROUPS  # collection went on to the end
        failed_lines = [r for r in _stored(path) if r["status"] == "failed"]
        assert len(failed_lines) == len(result.failed)  # each stored, with its reason
        assert all(f"env server {server.url}" in (r.get("error") or "") for r in failed_lines)
        for record in result.failed:
            assert f"env server {server.url}" in record.error
            assert "unreachable" in record.error or "ServerUnavailable" in record.error
        assert check_file(path, tokenizer=builtin).ok

        server.start()  # the same port, a fresh process: no session survived
        again = RemoteDataset.open(server.url, "guess_number", group_size=GROUP_SIZE,
                                   n_groups=GROUPS, tokenizer=builtin)  # fmt: skip
        resumed = _run(again.builders, TrajectoryStore(path))
        assert resumed.skipped == len(result.ok)
        assert len(resumed.ok) == GROUPS - len(result.ok) and not resumed.failed
        assert check_file(path, tokenizer=builtin).ok
    finally:
        server.stop()

    local = make("guess_number").dataset(builtin, group_size=GROUP_SIZE, n_groups=GROUPS)
    local_path = tmp_path / "local.jsonl"
    _run([local.get_batch(i)[0] for i in range(len(local))], TrajectoryStore(local_path))

    def ok_by_key(p):
        return {r["key"]: {k: v for k, v in r.items() if k != "created"}
                for r in _stored(p) if r["status"] == "ok"}  # fmt: skip

    assert ok_by_key(path) == ok_by_key(local_path)
