"""A verified identity is the server's, not the client's belief: on the real vLLM server.

* a cut connection (a loopback proxy between the policy and the server) loses the
  proof; when the server answers again a re-probe restores it, as it was;
* a sync step that fails half-way reports that step's error, and the weights are
  not vouched for until a sync succeeds (full) or a re-probe shows the previous
  adapter is still served (LoRA);
* a server killed and restarted at the same address comes back with its base
  checkpoint: the policy sees a new instance, the re-probe (of the lost identity's
  own fingerprint, however many syncs the policy has) finds other weights, and
  nothing after the restart is stamped with the pushed version; a LoRA policy
  syncs its next version onto the restarted server; the engine processes of a
  server whose API process was killed end by themselves.

Updates are one AdamW step at lr 1e-5 (``one_rl_step``), the size real RL makes.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from support.tcp_proxy import TcpProxy
from support.vllm_server import (  # noqa: F401  (the session fixture)
    LORA_RANK,
    SERVED_NAME,
    restore_base_weights,
    vllm_server,
)
from support.weight_updates import _group_builders, one_rl_step

from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.policies.base import PolicyError
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.policies.vllm_server import VLLMOptions, _wait_group_gone, start_vllm
from agentenvs.rollout.weights.engine import WeightSyncError
from agentenvs.rollout.weights.probe import Probe, torch_reference
from agentenvs.rollout.weights.sync import WeightSync

pytestmark = pytest.mark.services  # starts a real service


@pytest.fixture
def proxy(vllm_server):  # noqa: F811
    host, port = vllm_server.url.removeprefix("http://").split(":")
    proxy = TcpProxy(host, int(port))
    yield proxy
    proxy.close()
    restore_base_weights(vllm_server)


def _policy(url: str, tokenizer, **options) -> OpenAICompatPolicy:
    return OpenAICompatPolicy(
        url, tokenizer=tokenizer, seed=3, weights_version=0, max_tokens=8,
        retries=1, backoff=0.05, timeout=30, **options,
    )  # fmt: skip


async def _proven(url: str, tokenizer, server, out, *, lora: bool, **options):
    """A policy on ``url`` whose weights were pushed (one step at lr 1e-5) and verified."""
    policy = _policy(url, tokenizer, **options)
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))
    trained = one_rl_step(server.model_dir, out / "v1", lr=1e-5, lora=lora, seed=1)
    push = sync.push_lora if lora else sync.push_full
    await push(out / "v1", torch_reference(trained))
    assert policy.weights.proof == "verified"
    return policy, sync, trained


async def test_a_cut_connection_loses_the_proof_and_a_reprobe_restores_it(
    proxy,
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    policy, _, _ = await _proven(proxy.url, tokenizer, vllm_server, tmp_path, lora=False)
    proven = policy.weights

    proxy.cut()
    with pytest.raises(PolicyError, match="did not answer"):
        await policy([5, 6, 7], [], max_tokens=2)
    assert policy.weights.proof == "lost" and not policy.weights.verified
    assert "ConnectError" in (policy.custody.lost or "")

    proxy.restore()
    out = await policy([5, 6, 7], [], max_tokens=2)  # re-probed first: the same server
    assert out.stamp["weights_proof"] == "verified" and policy.weights == proven
    assert policy.custody.lost is None
    await policy.aclose()


async def test_a_full_reload_that_fails_half_way_reports_its_own_error_and_vouches_for_nothing(
    proxy,
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    policy = _policy(proxy.url, tokenizer)
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))
    trained = one_rl_step(vllm_server.model_dir, tmp_path / "v1", lr=1e-5, lora=False, seed=1)
    reload = sync.engine.reload_weights

    async def dies_during_the_load(path: str) -> None:
        proxy.cut()  # the server is gone as the reload is sent, and at the resume after it
        await reload(path)

    sync.engine.reload_weights = dies_during_the_load
    with pytest.raises(WeightSyncError) as failed:
        await sync.push_full(tmp_path / "v1", torch_reference(trained))
    assert str(failed.value).startswith("/collective_rpc failed"), failed.value  # not "/resume"
    assert any("resuming the paused servers failed too" in n for n in failed.value.__notes__)
    assert policy.weights.failed and policy.weights.version == 1 and not policy.weights.verified
    proxy.restore()
    with pytest.raises(PolicyError, match="sampling refused"):
        await policy([5, 6, 7], [], max_tokens=2)
    # The server was never paused for good: a sync now goes through.
    sync.engine.reload_weights = reload
    report = await sync.push_full(tmp_path / "v1", torch_reference(trained))
    assert report.identity.proof == "verified" and report.identity.version == 1
    await policy.aclose()


async def test_a_lora_load_that_fails_loses_the_proof_until_the_previous_adapter_is_reprobed(
    proxy,
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    policy, sync, _ = await _proven(proxy.url, tokenizer, vllm_server, tmp_path, lora=True)
    proven = policy.weights
    second = one_rl_step(vllm_server.model_dir, tmp_path / "v2", lr=1e-5, lora=True, seed=2)
    load = sync.engine.load_lora

    async def dies_during_the_load(name: str, path: str) -> None:
        proxy.cut()
        await load(name, path)

    sync.engine.load_lora = dies_during_the_load
    with pytest.raises(WeightSyncError, match=r"^/v1/load_lora_adapter failed"):
        await sync.push_lora(tmp_path / "v2", torch_reference(second))
    assert policy.weights.version == 1 and policy.weights.proof == "lost"
    proxy.restore()
    out = await policy([5, 6, 7], [], max_tokens=2)
    assert out.stamp["weights_proof"] == "verified" and policy.weights == proven
    await sync.unload_adapters()
    await policy.aclose()


async def test_a_restarted_server_is_a_new_instance_and_its_turns_are_never_stamped_as_pushed(
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    """One restart, three holes: the engine processes of a SIGKILLed API server end by
    themselves; a policy with two syncs re-probes the fingerprint of the identity it
    lost (not the last-constructed sync's, which knows none and called the base model
    "v1, indistinguishable"); a LoRA policy re-syncs after the restart (it reused the
    failed version's number and scored an adapter the new server no longer had)."""
    options = VLLMOptions(served_model_name=SERVED_NAME, lora_rank=LORA_RANK)
    first = start_vllm(vllm_server.model_dir, tmp_path / "first.log", options)
    port = int(first.url.rsplit(":", 1)[1])
    second = None
    try:
        adapter, lora_sync, _ = await _proven(
            first.url, tokenizer, vllm_server, tmp_path / "lora", lora=True,
            instance_check_interval=0.2,
        )  # fmt: skip
        policy, sync, trained = await _proven(
            first.url, tokenizer, vllm_server, tmp_path, lora=False, instance_check_interval=0.2
        )
        # A second sync on the same policy (another probe and tolerance), made last.
        WeightSync(policy, probe=Probe.default(len(tokenizer), length=160), dtype="bfloat16")
        before = await collect(_group_builders(tokenizer), policy, CollectOptions(progress=False))
        turns = [tr for t in before.ok[0].group.trajectories for tr in t.transitions]
        assert {
            (tr.logs["policy/weights_version"], tr.logs["policy/weights_proof"]) for tr in turns
        } == {(1, "verified")}

        # SIGKILL of the API server alone, as a crash gives: its engine processes end
        # by themselves, without stop().
        members = _group_members(first.process.pid)
        assert len(members) > 1, members  # the engine core runs in its own process
        os.kill(first.process.pid, signal.SIGKILL)
        first.process.wait(30)
        assert _wait_group_gone(first.process, 30), _group_members(first.process.pid)

        with pytest.raises(PolicyError):
            await policy([5, 6, 7], [], max_tokens=2)  # nothing listens: the proof is lost
        assert policy.weights.proof == "lost"
        second = start_vllm(
            vllm_server.model_dir, tmp_path / "second.log", VLLMOptions(
                served_model_name=SERVED_NAME, lora_rank=LORA_RANK, port=port)
        )  # fmt: skip
        time.sleep(0.3)
        after = await collect(_group_builders(tokenizer), policy, CollectOptions(progress=False))
        assert not after.ok and after.failed
        assert all("no longer serves weights version 1" in r.error for r in after.failed)
        assert policy.weights.failed and not policy.weights.verified

        # The LoRA policy: its adapter is gone with the restart; a push of the next
        # version verifies, numbered past the version its turns were stamped with.
        with pytest.raises(PolicyError, match="not vouched for"):
            await adapter([5, 6, 7], [], max_tokens=2)
        assert adapter.weights.failed and adapter.weights.version == 1
        next_step = one_rl_step(vllm_server.model_dir, tmp_path / "lora-v2", lr=1e-5, lora=True)
        report = await lora_sync.push_lora(tmp_path / "lora-v2", torch_reference(next_step))
        assert (report.identity.version, report.identity.proof) == (2, "verified")
        out = await adapter([5, 6, 7], [], max_tokens=2)
        assert (out.stamp["weights_version"], out.stamp["weights_proof"]) == (2, "verified")
        await adapter.aclose()

        # A new instance seen by its start time alone, no connection error: here the
        # recorded start time is made stale, so the server looks restarted although it
        # still serves v1; the re-probe that follows finds the same weights.
        report = await sync.push_full(tmp_path / "v1", torch_reference(trained))
        assert report.identity.proof == "verified" and policy.instances.known
        real = dict(policy.instances.known)
        policy.instances.known = dict.fromkeys(real, "0")
        reprobes: list[str | None] = []
        reprobe = policy.custody.reprobe
        assert reprobe is not None

        async def counted(fingerprint) -> None:
            reprobes.append(policy.custody.lost)
            await reprobe(fingerprint)

        policy.custody.reprobe = counted
        time.sleep(0.3)
        out = await policy([5, 6, 7], [], max_tokens=2)
        assert len(reprobes) == 1 and "is a new server instance" in reprobes[0]
        assert out.stamp["weights_proof"] == "verified" and policy.instances.known == real
        await policy.aclose()
    finally:
        first.stop()
        if second is not None:
            second.stop()


def _group_members(pgid: int) -> list[int]:
    members = []
    for stat in os.listdir("/proc"):
        if not stat.isdigit():
            continue
        try:
            with open(f"/proc/{stat}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(stat))
    return members
