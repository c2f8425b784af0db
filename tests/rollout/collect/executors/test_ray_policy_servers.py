"""Several servers of one model behind the OpenAI-compatible policy, inside Ray actors.

A second vLLM is costly on this 2-core machine, so the two servers here are
stand-ins, not vLLM: two instances of the FastAPI emulation in
tests/support/rollout_vllm_standin.py (vLLM's completions wire format, answered by
a tiny transformers model), each counting what it receives. Two real vLLM servers
run once, for weight sync, in tests/rollout/weights/test_vllm_weights_servers.py. Sampling
seeds are per turn, so which server answers does not change a token, and a run
through two servers in Ray actors must store the records the in-process run stores.
"""

from __future__ import annotations

import json

import pytest
from support.ray_cluster import in_module_loop, two_node_cluster, without_timing  # noqa: F401
from support.rollout_tiny_model import save_tiny_model
from support.rollout_vllm_standin import Behaviour, free_port, make_app, serve
from typer.testing import CliRunner

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.rendered_env import Limits
from agentenvs.rollout.cli import app
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.executors import PolicySpec
from agentenvs.rollout.collect.executors.ray_executor import RayExecutor
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.policies.hf import HFPolicy
from agentenvs.rollout.weights.probe import Probe
from agentenvs.rollout.weights.sync import WeightSync

pytestmark = pytest.mark.services  # starts a Ray cluster (the policy servers are stand-ins)


@pytest.fixture(scope="module")
def servers(tmp_path_factory, tokenizer):
    """Two stand-in servers of the same tiny model, each with its own copy and request counts."""
    directory = save_tiny_model(tmp_path_factory.mktemp("tiny-llama"), tokenizer)
    seen = [Behaviour(), Behaviour()]
    with (
        serve(make_app(HFPolicy(str(directory)).sampler, seen[0])) as first,
        serve(make_app(HFPolicy(str(directory)).sampler, seen[1])) as second,
    ):
        yield [first, second], seen


def _builders(tokenizer, groups: int) -> list:
    limits = Limits(max_turns=3, max_tokens_per_turn=10, on_truncated_action="pass")
    config = GuessNumberConfig(tasks=groups, limits=limits)
    return [config.group_builder(i, 2, tokenizer) for i in range(groups)]


def _stored(path) -> dict[str, dict]:
    lines = [without_timing(json.loads(line)) for line in path.read_text().splitlines()]
    return {line["key"]: line for line in lines}


@in_module_loop
async def test_actors_spread_turns_over_both_servers_and_store_the_in_process_records(
    two_node_cluster,  # noqa: F811  (the fixture)
    servers,
    tokenizer,
    tmp_path,
):
    urls, seen = servers
    options = {"url": urls, "tokenizer": tokenizer, "seed": 5, "max_tokens": 10}
    stored, received, driver_sent = {}, {}, {}
    for kind in ("in-process", "ray"):
        counts_before = [s.requests for s in seen]
        policy = make_policy("openai", **options)
        store = TrajectoryStore(tmp_path / f"{kind}.jsonl")
        run = {"store": store}
        limits = CollectOptions(progress=False, concurrency=4)
        if kind == "ray":
            async with RayExecutor(policy_spec=PolicySpec("openai", options)) as executor:
                result = await collect(
                    _builders(tokenizer, 4), policy, limits, executor=executor, **run
                )
            assert set(executor.placements) == {r.key for r in result.records}
        else:
            result = await collect(_builders(tokenizer, 4), policy, limits, **run)
        await policy.aclose()
        assert len(result.ok) == 4, [r.error for r in result.failed]
        turns = sum(len(t.transitions) for r in result.ok for t in r.group.trajectories)
        received[kind] = [
            s.requests - before for s, before in zip(seen, counts_before, strict=True)
        ]
        assert sum(received[kind]) == turns
        driver_sent[kind] = sum(policy.servers.sent.values())
        stored[kind] = _stored(store.path)
    assert stored["ray"] == stored["in-process"]
    assert min(received["ray"]) > 0 and min(received["in-process"]) > 0  # both servers used
    assert driver_sent["ray"] == 0  # the actors' own clients sampled, not the driver's
    assert driver_sent["in-process"] >= sum(received["in-process"])  # and a model lookup
    policy_section = next(iter(stored["ray"].values()))["provenance"]["policy"]
    assert policy_section["options"]["urls"] == urls  # the policy as it described itself


async def test_a_dead_server_is_skipped_by_the_retry(servers, tokenizer):
    urls, seen = servers
    dead = f"http://127.0.0.1:{free_port()}"
    policy = make_policy(
        "openai", url=f"{dead},{urls[0]}", tokenizer=tokenizer, seed=5, backoff=0.01, retries=1
    )
    before = seen[0].requests
    result = await collect(_builders(tokenizer, 2), policy, CollectOptions(progress=False))
    await policy.aclose()
    assert len(result.ok) == 2, [r.error for r in result.failed]
    turns = sum(len(t.transitions) for r in result.ok for t in r.group.trajectories)
    assert seen[0].requests - before == turns
    assert policy.servers.sent[dead] > 0  # tried, failed over, never the last word


def test_url_lists_are_parsed_and_a_weight_sync_drives_every_server(servers, tokenizer):
    urls, _ = servers
    policy = make_policy("openai", url=f" {urls[0]}/v1 , {urls[1]},{urls[0]}")
    assert policy.urls == tuple(urls) and policy.url == urls[0]
    with pytest.raises(ValueError, match="at least one server"):
        make_policy("openai", url=" , ")
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))
    assert [engine.url for engine in sync.engines] == list(urls)


def test_cli_spreads_an_openai_policy_over_servers_from_ray_actors(
    two_node_cluster,  # noqa: F811  (the fixture)
    servers,
    tmp_path,
):
    urls, seen = servers
    before = [s.requests for s in seen]
    out = tmp_path / "g.jsonl"
    args = ["rollout", "guess_number", "--groups", "2", "--group-size", "2", "--out", str(out),
            "--policy", "openai", "--policy-opt", f"url={urls[0]},{urls[1]}",
            "--policy-opt", "max_tokens=10", "--policy-opt", "seed=3", "--tokenizer", "builtin",
            "--executor", "ray", "--ray-address", two_node_cluster.address,
            "--json-summary", "--no-progress"]  # fmt: skip
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"] == 2
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    turns = sum(len(t["transitions"]) for line in lines for t in line["trajectories"])
    received = [s.requests - b for s, b in zip(seen, before, strict=True)]
    assert sum(received) == turns and min(received) > 0
    assert lines[0]["provenance"]["policy"]["options"]["urls"] == urls  # the CLI's layout
