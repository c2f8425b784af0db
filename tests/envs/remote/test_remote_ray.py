"""Remote builders under the Ray executor: the actors on a real loopback Ray cluster
open their groups on the env server, and the records equal the in-process ones."""

from __future__ import annotations

import json

import pytest
from support.env_servers import thread_server
from support.ray_cluster import loopback_cluster, without_timing

from agentenvs.envs.registry import make
from agentenvs.envs.remote import RemoteDataset
from agentenvs.envs.serving.app import ServedEnvs, create_app
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.executors.ray_executor import RayExecutor
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.tokenizer import load_tokenizer

pytestmark = pytest.mark.services


def _lines(path) -> dict[str, dict]:
    return {
        r["key"]: r
        for r in (without_timing(json.loads(line)) for line in path.read_text().splitlines())
    }


async def test_ray_actors_play_remote_envs_with_the_in_process_records(tmp_path):
    builtin = load_tokenizer("builtin")
    local = make("guess_number").dataset(builtin, group_size=2, n_groups=3)
    local_store = TrajectoryStore(tmp_path / "local.jsonl")
    await collect([local.get_batch(i)[0] for i in range(3)], make_policy("scripted"), CollectOptions(progress=False), store=local_store)  # fmt: skip
    app = create_app(ServedEnvs(["guess_number"], builtin))
    with thread_server(app) as url, loopback_cluster():
        remote = RemoteDataset.open(url, "guess_number", group_size=2, n_groups=3,
                                    tokenizer=builtin)  # fmt: skip
        store = TrajectoryStore(tmp_path / "ray.jsonl")
        async with RayExecutor(placement_timeout=120) as executor:
            result = await collect(remote.builders, make_policy("scripted"), CollectOptions(progress=False), store=store, executor=executor)  # fmt: skip
        assert len(result.ok) == 3, [r.error for r in result.failed]
        served = app.state.table.closed_total
    assert served == 3  # the groups were opened and closed on the server, by the actors
    assert _lines(store.path) == _lines(local_store.path)
