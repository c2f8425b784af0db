"""Weight sync over a policy that spreads its turns over two real vLLM servers.

The second server is started here from the session server's model directory (same
base weights, same LoRA settings) and stopped after the module. Every server must be
loaded and verified before the policy moves on: the load balancer may send the next
turn to any of them.
"""

from __future__ import annotations

import asyncio

import pytest
from support.tcp_proxy import TcpProxy
from support.vllm_server import (  # noqa: F401  (the session fixture)
    LORA_RANK,
    SERVED_NAME,
    restore_base_weights,
    vllm_server,
)
from support.weight_updates import _adapter, _group_builders, _load, _perturbed

from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.policies.base import PolicyError
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.policies.vllm_server import VLLMOptions, start_vllm
from agentenvs.rollout.weights.probe import Probe, VerificationError, torch_reference
from agentenvs.rollout.weights.sync import WeightSync

pytestmark = pytest.mark.services  # starts a real service


@pytest.fixture(scope="module")
def second_server(vllm_server, tmp_path_factory):  # noqa: F811
    options = VLLMOptions(served_model_name=SERVED_NAME, lora_rank=LORA_RANK)
    log = tmp_path_factory.mktemp("vllm-b") / "vllm.log"
    server = start_vllm(vllm_server.model_dir, log, options)
    yield server
    server.stop()


@pytest.fixture
def sync(vllm_server, second_server, tokenizer):  # noqa: F811
    policy = OpenAICompatPolicy(
        [vllm_server.url, second_server.url],
        tokenizer=tokenizer,
        seed=11,
        weights_version=0,
        max_tokens=12,
    )
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))
    yield sync
    asyncio.run(sync.unload_adapters())  # a fresh loop: the test's own is closed
    restore_base_weights(vllm_server)
    restore_base_weights(second_server)


async def _adapter_answers(policy: OpenAICompatPolicy, name: str, server: str) -> bool:
    body = {"model": name, "prompt": [5, 6, 7], "max_tokens": 1}
    try:
        await policy.request("POST", "/v1/completions", body, server=server)
    except PolicyError:
        return False
    return True


async def test_a_lora_sync_loads_and_verifies_every_server_then_both_serve_it(
    sync,
    vllm_server,  # noqa: F811
    second_server,
    tokenizer,
    tmp_path,
):
    urls = [vllm_server.url, second_server.url]
    trained = _adapter(vllm_server.model_dir, tmp_path / "lora-v1", seed=3)
    report = await sync.push_lora(tmp_path / "lora-v1", torch_reference(trained))
    name = sync.policy.weights.name
    assert [probe.url for probe in report.probes] == urls
    assert all(probe.max_abs_diff < 1e-3 for probe in report.probes)
    for url in urls:  # loaded on each server, under the same name
        assert await _adapter_answers(sync.policy, name, url)
    # The adapter is not the base model, on either server: the probes have teeth.
    base = torch_reference(_load(vllm_server.model_dir))
    for probe in report.probes:
        sequence = sync.probe.prompt + probe.tokens
        before = base(sequence, len(sync.probe.prompt))
        assert max(abs(a - b) for a, b in zip(before, probe.server, strict=True)) > 1e-2

    result = await collect(
        _group_builders(tokenizer) * 2, sync.policy, CollectOptions(progress=False)
    )
    assert len(result.ok) == 2, [r.error for r in result.failed]
    for record in result.ok:
        for traj in record.group.trajectories:
            for tr in traj.transitions:
                assert tr.logs["policy/weights_version"] == 1
                assert tr.logs["policy/weights"] == sync.policy.weights.label()
    assert all(sync.policy.servers.sent[url] > 0 for url in urls)  # both served turns
    await sync.policy.aclose()


async def test_one_server_that_does_not_match_fails_the_sync_and_is_named(
    sync,
    vllm_server,  # noqa: F811
    second_server,
    tmp_path,
):
    # The second server drifts to other base weights behind the policy's back.
    drifted = _perturbed(vllm_server.model_dir, tmp_path / "drift", seed=7)
    alone = WeightSync(
        OpenAICompatPolicy(second_server.url), probe=Probe.default(drifted.config.vocab_size)
    )
    await alone.push_full(tmp_path / "drift", torch_reference(drifted))

    trained = _adapter(vllm_server.model_dir, tmp_path / "lora-v1", seed=3)
    with pytest.raises(VerificationError, match=f"on {second_server.url}"):
        await sync.push_lora(tmp_path / "lora-v1", torch_reference(trained))
    identity = sync.policy.weights
    assert identity.version == 0 and identity.path != "lora"  # the policy did not move

    # Once the second server has the base weights again, the same version syncs: the
    # name that failed was unloaded from both servers, so it can be loaded again.
    base = _load(vllm_server.model_dir)
    await alone.push_full(vllm_server.model_dir, torch_reference(base), version=0)
    await alone.policy.aclose()
    report = await sync.push_lora(tmp_path / "lora-v1", torch_reference(trained))
    assert report.identity.verified and report.identity.version == 1
    assert all(probe.max_abs_diff < 1e-3 for probe in report.probes)
    await sync.policy.aclose()


async def test_a_server_that_cannot_be_paused_leaves_none_of_the_others_paused(
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    from agentenvs.rollout.policies.vllm_server import free_port
    from agentenvs.rollout.weights.engine import WeightSyncError

    # The second server answers the probe before the load, then is gone at its pause
    # (a loopback proxy to the same server, cut as it is paused).
    host, port = vllm_server.url.removeprefix("http://").split(":")
    proxy = TcpProxy(host, int(port))
    policy = OpenAICompatPolicy(
        [vllm_server.url, proxy.url], tokenizer=tokenizer, weights_version=0, retries=0
    )
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))
    pause = sync.engines[1].pause

    async def gone_at_its_pause() -> bool:
        proxy.cut()
        return await pause()

    sync.engines[1].pause = gone_at_its_pause
    trained = _perturbed(vllm_server.model_dir, tmp_path / "v1", seed=1)
    try:
        with pytest.raises(WeightSyncError, match="/pause"):
            await sync.push_full(tmp_path / "v1", torch_reference(trained))
    finally:
        proxy.close()
    # The live server was paused first; it must answer again (not hold the request).
    body = {"model": SERVED_NAME, "prompt": [5, 6, 7], "max_tokens": 2}
    answer = await asyncio.wait_for(
        policy.request("POST", "/v1/completions", body, server=vllm_server.url), 60
    )
    assert answer["choices"]
    assert policy.weights.version == 0 and not policy.weights.failed  # nothing was loaded

    # A server that never answers fails the sync before anything is paused.
    gone = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    dead = OpenAICompatPolicy([vllm_server.url, gone], tokenizer=tokenizer, retries=0)
    with pytest.raises(WeightSyncError, match=f"scoring the probe on {gone} before the load"):
        await WeightSync(dead, probe=Probe.default(len(tokenizer))).push_full(
            tmp_path / "v1", torch_reference(trained)
        )
    answer = await asyncio.wait_for(
        dead.request("POST", "/v1/completions", body, server=vllm_server.url), 60
    )
    assert answer["choices"] and not dead.weights.failed
    await policy.aclose()
    await dead.aclose()
