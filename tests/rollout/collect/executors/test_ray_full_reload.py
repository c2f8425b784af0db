"""A full in-place reload while groups run in Ray actors: the gate that spans actors.

The actors' clients sample the real vLLM directly; without a gate over them a full
reload in the middle of a collection serves turns with the new weights and stamps
them with the old version (every turn an actor sampled after the reload, until its
next group, in a run of this test with the gate left out). Here, on a real two-node
loopback cluster and the suite's real vLLM:

* the gate itself: closing closes every actor's gate, opening hands each actor's
  client the new identity; a drain stuck on a server that never answers is a clear
  error and leaves every actor open;
* a real ``WeightSync.push_full`` waits for the actors' requests in flight (held in
  vLLM by its own pause) before it loads, and the episodes' next requests wait for
  the verified weights, which they are then stamped with;
* a long collection through Ray actors with a full reload in the middle: every turn's
  logprobs match the model of the version it is stamped with (within 1e-3) and not
  the other one, and both versions occur.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import pytest_asyncio
from support.ray_cluster import in_module_loop, two_node_cluster  # noqa: F401
from support.ray_weight_sync import _max_diff, _turns, driver_sync
from support.vllm_server import vllm_server  # noqa: F401  (the session fixture)
from support.weight_updates import _load, _perturbed

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.rendered_env import Limits
from agentenvs.envs.weights_identity import WeightsIdentity
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.executors import PolicySpec
from agentenvs.rollout.collect.executors.ray_executor import RayExecutor
from agentenvs.rollout.collect.executors.remote_gate import ActorsGate, GateDrainTimeout
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.weights.probe import TOLERANCE, torch_reference
from agentenvs.rollout.weights.stamps import VERSION_LOG

pytestmark = pytest.mark.services  # starts a real service

TOL = TOLERANCE["float32"]  # 8x the measured fp32 noise (rollout/weights/proof.py)


async def _until(check, what: str, polls: int = 4000) -> None:
    """Poll until ``await check()``; an error if it never holds."""
    for _ in range(polls):
        if await check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never reached: {what}")


async def _gate_states(executor: RayExecutor) -> list[dict]:
    return [await host.handle.gate_state.remote() for host in executor._hosts() if host.ready]


def _in_flight_at_least(executor: RayExecutor, count: int):
    async def check() -> bool:
        return sum(s["in_flight"] for s in await _gate_states(executor)) >= count

    return check


def _all_closed(executor: RayExecutor, closed: bool = True):
    async def check() -> bool:
        states = await _gate_states(executor)
        return bool(states) and all(s["closed"] is closed for s in states)

    return check


def _long_builders(tokenizer, groups: int, turns: int = 4) -> list:
    limits = Limits(max_turns=turns, max_tokens_per_turn=32, on_truncated_action="pass")
    config = GuessNumberConfig(tasks=groups, limits=limits)
    return [config.group_builder(i, 2, tokenizer) for i in range(groups)]


@contextlib.asynccontextmanager
async def _silent_server():
    """A TCP server on loopback that accepts requests and never answers: a stuck engine."""
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read(1 << 16)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for writer in held:
            writer.close()
        server.close()


@in_module_loop
async def test_the_actors_gate_closes_every_actor_and_hands_over_the_identity(
    two_node_cluster,  # noqa: F811
    tokenizer,
):
    async with _silent_server() as url:
        options = {"url": url, "model": "m", "weights_version": 0, "timeout": 3, "retries": 0}
        policy = OpenAICompatPolicy(**options)
        async with RayExecutor(policy_spec=PolicySpec("openai", options), num_actors=2) as executor:
            gate = executor.gate_for(policy)
            assert isinstance(gate, ActorsGate) and gate in policy.gate.linked
            assert executor.gate_for(policy) is gate  # one per policy
            # Two groups whose first requests hang on the silent server: in flight.
            collecting = asyncio.create_task(
                collect(_long_builders(tokenizer, 2, turns=1), policy, CollectOptions(progress=False, retries=0), executor=executor)
            )  # fmt: skip
            await _until(_in_flight_at_least(executor, 2), "requests in flight on the actors")
            impatient = ActorsGate(executor._hosts, executor._next_serial, drain_timeout=0.5)
            with pytest.raises(GateDrainTimeout, match=r"still had sampling requests in flight"):
                await impatient.close()
            assert impatient.is_open and all(not s["closed"] for s in await _gate_states(executor))
            result = await collecting  # the requests time out: failed groups, nothing stuck
            assert len(result.failed) == 2 and "did not answer" in result.failed[0].error

            # Nothing in flight now: a close drains at once and holds every actor.
            await gate.close()
            assert not gate.is_open and await _all_closed(executor)()
            v1 = WeightsIdentity(version=1, path="lora", name="run-v1", verified=True)
            await gate.open(v1)
            states = await _gate_states(executor)
            assert gate.is_open and all(not s["closed"] for s in states)
            versions = [v for s in states for v in s["versions"]]
            assert versions and set(versions) == {1}  # every actor's client took it

            # An actor that died counts as drained: its requests died with it.
            import ray

            ray.kill(executor._hosts()[0].handle, no_restart=True)
            await gate.close()
            await gate.open(None)
            assert gate.is_open
        assert policy.gate.linked == []  # the closed executor unlinked its gate


# ---- against the real vLLM -------------------------------------------------------------
@pytest_asyncio.fixture(loop_scope="module")
async def full_sync(vllm_server, tokenizer):  # noqa: F811
    async with driver_sync(vllm_server, tokenizer, seed=5, max_tokens=32) as pair:
        yield pair


@in_module_loop
async def test_a_reload_waits_for_the_actors_requests_in_flight_and_holds_their_next_ones(
    two_node_cluster,  # noqa: F811
    full_sync,
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    sync, spec = full_sync
    await sync.policy.model_name()
    base = torch_reference(_load(vllm_server.model_dir))
    new = torch_reference(_perturbed(vllm_server.model_dir, tmp_path / "v1", seed=7))
    async with RayExecutor(policy_spec=spec, num_actors=2) as executor:
        await sync.engine.pause()  # the engine holds what it is sent: in flight, unanswered
        try:
            collecting = asyncio.create_task(
                collect(_long_builders(tokenizer, 2, turns=3), sync.policy, CollectOptions(progress=False), executor=executor)
            )  # fmt: skip
            await _until(_in_flight_at_least(executor, 4), "every episode's first request sent")
            pushing = asyncio.create_task(sync.push_full(tmp_path / "v1", new))
            await _until(_all_closed(executor), "the sync closes every actor's gate")
            assert not pushing.done()  # it waits for the requests in flight: nothing loaded
            assert sum(s["in_flight"] for s in await _gate_states(executor)) == 4
        finally:
            await sync.engine.resume()
        report = await pushing
        result = await collecting
    assert report.identity.verified and report.identity.version == 1
    assert len(result.ok) == 2, [r.error for r in result.failed]
    for record in result.ok:
        for traj in record.group.trajectories:
            turns = traj.transitions
            assert turns[0].logs[VERSION_LOG] == 0  # in flight when the sync began
            assert _diff(base(turns[0].ob + turns[0].ac.tokens, len(turns[0].ob)),
                         turns[0].ac.logprobs) < TOL  # fmt: skip
            for turn in turns[1:]:  # asked for while the gate was closed: held, then new
                assert turn.logs[VERSION_LOG] == 1
                assert turn.logs["policy/weights"] == report.identity.label()
                assert _max_diff(new, turn) < TOL < _max_diff(base, turn)
    assert any(len(traj.transitions) > 1 for r in result.ok for traj in r.group.trajectories)


def _diff(expected: list[float], got: list[float]) -> float:
    return max(abs(a - b) for a, b in zip(expected, got, strict=True))


@in_module_loop
async def test_a_full_reload_mid_collection_stamps_every_turn_with_the_weights_that_served_it(
    two_node_cluster,  # noqa: F811
    full_sync,
    vllm_server,  # noqa: F811
    tokenizer,
    tmp_path,
):
    sync, spec = full_sync
    # Version 1: the base model, reloaded (whatever an earlier test left on the server).
    models = {1: _load(vllm_server.model_dir)}
    await sync.push_full(vllm_server.model_dir, torch_reference(models[1]), version=1)
    models[2] = _perturbed(vllm_server.model_dir, tmp_path / "v2", seed=8)
    groups = 16
    async with RayExecutor(policy_spec=spec, placement_timeout=120) as executor:
        collecting = asyncio.create_task(
            collect(_long_builders(tokenizer, groups), sync.policy, CollectOptions(progress=False, concurrency=8), executor=executor)
        )  # fmt: skip
        await _until(_in_flight_at_least(executor, 1), "the collection is under way")
        await asyncio.sleep(0.5)  # a few turns in: the reload lands mid-episode
        report = await sync.push_full(tmp_path / "v2", torch_reference(models[2]))
        assert report.identity.version == 2
        result = await collecting
    assert len(result.ok) == groups, [r.error for r in result.failed]
    turns = _turns(result.ok)
    by_version: dict[int, list] = {1: [], 2: []}
    for turn in turns:
        by_version[turn.logs[VERSION_LOG]].append(turn)
    assert by_version[1] and by_version[2], {v: len(t) for v, t in by_version.items()}
    references = {v: torch_reference(m) for v, m in models.items()}
    for version, stamped in by_version.items():
        other = 3 - version
        # Each turn matches its own version's model and not the other one: none mixed.
        assert max(_max_diff(references[version], tr) for tr in stamped) < TOL
        assert min(_max_diff(references[other], tr) for tr in stamped) > TOL
