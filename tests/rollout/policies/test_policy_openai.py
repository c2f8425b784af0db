"""The OpenAI-compatible server policy against a local stand-in for vLLM and SGLang.

tests/support/rollout_vllm_standin.py serves the subset of both wire formats the
policy uses on 127.0.0.1, answered by a tiny transformers model; it can be made
slow, failing or rejecting, which a real engine cannot be on demand. For vLLM this
is the fast half: tests/rollout/policies/test_vllm_policy.py runs the same policy
against a real vLLM server (CPU build, .venv-vllm). For SGLang (``api="sglang"``,
its native ``/generate``) this emulation is the only test: no SGLang server runs
here (its PyPI install brings CUDA kernels; its CPU backend is built from source
and targets Intel Xeon CPUs with AMX, which this AMD EPYC VM lacks).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from support.rollout_tiny_model import save_tiny_model, teacher_forced_logprobs
from support.rollout_vllm_standin import Behaviour, free_port, make_app, serve

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.rendered_env import Limits
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.rollouts import do_group_rollout
from agentenvs.rollout.collect.store import read_records
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.policies.base import PolicyError
from agentenvs.rollout.policies.hf import HFPolicy

PROMPT = "<|im_start|>user\nguess the number<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def hf(tmp_path_factory, tokenizer):
    directory = save_tiny_model(tmp_path_factory.mktemp("tiny-llama"), tokenizer)
    return HFPolicy(str(directory))


@pytest.fixture
def server(hf):
    behaviour = Behaviour()
    with serve(make_app(hf.sampler, behaviour)) as url:
        yield url, behaviour


def _prompt(tokenizer) -> list[int]:
    return tokenizer.encode(PROMPT, add_special_tokens=False)


@pytest.mark.parametrize("api", ["vllm", "sglang"])
async def test_guess_number_group_through_the_server(api, server, hf, tokenizer):
    url, behaviour = server
    policy = make_policy("openai", url=url, api=api, tokenizer=tokenizer, seed=5)
    limits = Limits(max_turns=3, max_tokens_per_turn=10, on_truncated_action="pass")
    builder = GuessNumberConfig(tasks=1, limits=limits).group_builder(0, 2, tokenizer)
    group = await do_group_rollout(builder, policy)
    assert behaviour.requests == sum(len(t.transitions) for t in group.trajectories)
    for traj in group.trajectories:
        last = traj.transitions[-1]
        sequence = last.ob + last.ac.tokens
        reference = teacher_forced_logprobs(hf.sampler.model, sequence)
        for tr in traj.transitions:
            assert 1 <= len(tr.ac.tokens) <= 10
            assert tr.ac.logprobs is not None and len(tr.ac.logprobs) == len(tr.ac.tokens)
            assert tr.ac.stop_reason in {"stop", "eos", "length"}
            if tr.ac.stop_reason == "length":
                assert len(tr.ac.tokens) == 10
            start = len(tr.ob)
            assert sequence[start : start + len(tr.ac.tokens)] == tr.ac.tokens
            assert tr.ac.logprobs == pytest.approx(
                reference[start : start + len(tr.ac.tokens)], abs=1e-4
            )
    await policy.aclose()


@pytest.mark.parametrize("api", ["vllm", "sglang"])
async def test_stop_reasons_map_from_the_wire(api, server, hf, tokenizer):
    url, _ = server
    prompt = _prompt(tokenizer)
    greedy = await HFPolicy(hf.sampler.model, tokenizer, temperature=0.0)(prompt, [], max_tokens=6)
    assert greedy.stop_reason == "length"
    policy = make_policy("openai", url=url, api=api, tokenizer=tokenizer, temperature=0.0)

    out = await policy(prompt, [], max_tokens=6)
    assert (out.tokens, out.stop_reason) == (greedy.tokens, "length")
    assert out.logprobs == pytest.approx(greedy.logprobs, abs=1e-5)

    stop_text = tokenizer.decode(greedy.tokens[2:4])
    out = await policy(prompt, [stop_text], max_tokens=6)
    assert out.stop_reason == "stop" and out.tokens[-1] in greedy.tokens[2:4]
    assert stop_text in tokenizer.decode(out.tokens)  # the stop string is kept

    out = await policy(prompt, [greedy.tokens[1]], max_tokens=6)
    assert out.stop_reason == "stop" and out.tokens == greedy.tokens[:2]

    # The server's EOS: a policy told that token is end-of-sequence reports "eos".
    eos_policy = make_policy(
        "openai", url=url, api=api, temperature=0.0, eos_token_ids=[greedy.tokens[1]]
    )
    out = await eos_policy(prompt, [greedy.tokens[1]], max_tokens=6)
    assert out.stop_reason == "eos"


async def test_request_bodies_follow_vllm_and_sglang_conventions(server, tokenizer):
    url, behaviour = server
    prompt = _prompt(tokenizer)
    vllm = make_policy("openai", url=url, model="tiny", temperature=0.7, top_p=0.9, seed=1)
    await vllm(prompt, ["</guess>", 17], max_tokens=3)
    body = behaviour.bodies[-1]
    assert body["prompt"] == prompt and body["max_tokens"] == 3
    assert body["stop"] == ["</guess>"] and body["stop_token_ids"] == [17]
    assert body["logprobs"] == 1 and body["return_tokens_as_token_ids"] is True
    assert body["include_stop_str_in_output"] is True and body["skip_special_tokens"] is False
    assert (body["temperature"], body["top_p"], body["seed"]) == (0.7, 0.9, 1)
    sglang = make_policy("openai", url=url, api="sglang", max_tokens=4)
    await sglang(prompt, ["</guess>"], max_tokens=None)
    body = behaviour.bodies[-1]
    assert body["input_ids"] == prompt and body["return_logprob"] is True
    params = body["sampling_params"]
    assert params["max_new_tokens"] == 4 and params["stop"] == ["</guess>"]
    assert params["no_stop_trim"] is True and params["skip_special_tokens"] is False


async def test_server_without_token_ids_is_a_clear_error(server, tokenizer):
    url, behaviour = server
    behaviour.ignore_token_ids = True
    policy = make_policy("openai", url=url, model="tiny")
    with pytest.raises(PolicyError, match="ignored return_tokens_as_token_ids"):
        await policy(_prompt(tokenizer), [], max_tokens=2)


async def test_vllm_finds_the_served_model_name(server, tokenizer):
    url, _ = server
    policy = make_policy("openai", url=url + "/v1")  # a base URL ending in /v1 works too
    await policy(_prompt(tokenizer), [], max_tokens=2)
    assert policy.model == "tiny"
    wrong = make_policy("openai", url=url, model="gpt-17", retries=3)
    with pytest.raises(PolicyError, match=r"rejected the request: HTTP 404.*gpt-17"):
        await wrong(_prompt(tokenizer), [], max_tokens=2)


async def test_a_rejected_request_carries_the_http_status(server, tokenizer):
    """Callers (the weight sync's engine) read the status, not the message text."""
    url, _ = server
    wrong = make_policy("openai", url=url, model="gpt-17", retries=0)
    with pytest.raises(PolicyError) as caught:
        await wrong(_prompt(tokenizer), [], max_tokens=2)
    assert caught.value.status == 404
    await wrong.aclose()


async def test_server_down_is_a_clear_error_without_hanging(tokenizer):
    url = f"http://127.0.0.1:{free_port()}"
    policy = make_policy("openai", url=url, model="m", retries=2, backoff=0.01)
    async with asyncio.timeout(60):  # hang guard only
        with pytest.raises(PolicyError) as caught:
            await policy(_prompt(tokenizer), [], max_tokens=2)
    message = str(caught.value)
    assert url in message and "did not answer after 3 attempts" in message
    assert "ConnectError" in message


async def test_slow_server_times_out_and_is_retried(server, tokenizer):
    url, behaviour = server
    behaviour.delay = 5.0
    policy = make_policy("openai", url=url, model="tiny", timeout=0.3, retries=1, backoff=0.01)
    with pytest.raises(PolicyError, match="did not answer after 2 attempts: timed out"):
        await policy(_prompt(tokenizer), [], max_tokens=2)
    assert behaviour.requests == 2  # the first attempt and one retry


async def test_overloaded_server_is_retried_until_it_answers(server, tokenizer):
    url, behaviour = server
    behaviour.fail_first = 2
    policy = make_policy("openai", url=url, model="tiny", retries=2, backoff=0.01)
    out = await policy(_prompt(tokenizer), [], max_tokens=3)
    assert len(out.tokens) == 3 and behaviour.requests == 3


async def test_client_errors_are_not_retried(server, tokenizer):
    url, behaviour = server
    behaviour.reject = True
    policy = make_policy("openai", url=url, api="sglang", retries=3, backoff=0.01)
    with pytest.raises(PolicyError, match=r"HTTP 400: .*too long"):
        await policy(_prompt(tokenizer), [], max_tokens=3)
    assert behaviour.requests == 1


async def test_requests_in_flight_are_bounded(server, tokenizer):
    url, behaviour = server
    behaviour.delay = 0.2
    policy = make_policy("openai", url=url, model="tiny", concurrency=2)
    outs = await asyncio.gather(*(policy(_prompt(tokenizer), [], max_tokens=2) for _ in range(6)))
    assert all(len(o.tokens) == 2 for o in outs)
    assert behaviour.requests == 6 and behaviour.peak == 2


async def test_requests_that_start_together_ask_the_model_name_once(server, tokenizer):
    url, behaviour = server
    behaviour.delay = 0.05
    policy = make_policy("openai", url=url, concurrency=8)  # no model: asked of the server
    await asyncio.gather(*(policy(_prompt(tokenizer), [], max_tokens=2) for _ in range(8)))
    assert policy.model == "tiny" and behaviour.model_lookups == 1
    await policy.aclose()


async def test_turns_reuse_the_connections_of_the_turns_before(server, tokenizer):
    # 24 in flight: more than httpx keeps alive by default (20), which opened 4 new
    # connections on every round after the first.
    url, behaviour = server
    behaviour.delay = 0.05
    policy = make_policy("openai", url=url, model="tiny", concurrency=24)
    for _ in range(3):
        await asyncio.gather(*(policy(_prompt(tokenizer), [], max_tokens=1) for _ in range(24)))
    assert behaviour.requests == 72 and len(behaviour.peers) <= 24
    await policy.aclose()


async def test_dead_server_fails_groups_with_a_clear_record(tokenizer):
    url = f"http://127.0.0.1:{free_port()}"
    policy = make_policy("openai", url=url, model="m", retries=1, backoff=0.01)
    builders = list(GuessNumberConfig(tasks=2).dataset(tokenizer, group_size=2).builders)
    result = await collect(builders, policy, CollectOptions(retries=1, progress=False))
    assert len(result.failed) == 2 and result.ok == []
    for record in result.failed:
        assert record.attempts == 2
        assert f"PolicyError: policy server {url}/v1/completions did not answer" in record.error


async def test_each_turn_of_a_group_gets_its_own_recorded_seed(server, tokenizer):
    url, behaviour = server
    policy = make_policy("openai", url=url, model="tiny", tokenizer=tokenizer, seed=5)
    limits = Limits(max_turns=2, max_tokens_per_turn=6, on_truncated_action="pass")
    builders = [GuessNumberConfig(tasks=1, limits=limits).group_builder(0, 3, tokenizer)]
    first = await collect(builders, policy, CollectOptions(progress=False), keys=["g"])
    sent = [body["seed"] for body in behaviour.bodies]
    logged = [
        tr.logs["policy/seed"] for traj in first.ok[0].group.trajectories for tr in traj.transitions
    ]
    assert sorted(sent) == sorted(logged) and len(set(sent)) == len(sent)
    behaviour.bodies.clear()
    builders = [GuessNumberConfig(tasks=1, limits=limits).group_builder(0, 3, tokenizer)]
    await collect(builders, policy, CollectOptions(progress=False), keys=["g"])
    assert sorted(body["seed"] for body in behaviour.bodies) == sorted(sent)  # reproducible
    await policy.aclose()


def test_cli_rollout_records_the_model_found_on_the_server(server, tmp_path):
    url, _ = server
    out = tmp_path / "cli.jsonl"
    command = [sys.executable, "-m", "agentenvs.rollout.cli", "rollout", "guess_number"]
    command += ["--policy", "openai", "--policy-opt", f"url={url}", "--policy-opt", "max_tokens=4"]
    command += ["--groups", "1", "--group-size", "2", "--out", str(out), "--no-progress"]
    command += ["--set", "limits.max_turns=1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (record,) = read_records(out)
    assert record.provenance["policy"]["model"] == "tiny"  # was null: read before any request
