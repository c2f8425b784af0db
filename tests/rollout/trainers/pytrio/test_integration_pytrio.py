"""PyTRIO: the sampling-client policy adapter and a GRPO step, on PyTRIO's own client.

The PyTRIO service needs an account, so its Actor is a local stand-in and the
Control plane is bypassed (see ``integration_pytrio_actor.py``); the client that
talks to it is PyTRIO's real ``SamplingClient`` stack. The remote trainer cannot
run here either: the GRPO-step test gives the example a stand-in training client
that runs PyTRIO's own client-side batch planning (what ``forward_backward``
validates before sending) and records the calls.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
from pytrio.client.training_batch import plan_training_batch
from pytrio.model.limits import TrainingLimits
from support.integration_pytrio_actor import ActorLog, make_actor_app, pytrio_sampling_client
from support.paths import EXAMPLES
from support.rollout_tiny_model import save_tiny_model
from support.rollout_vllm_standin import serve

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.registry import make
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore, read_records
from agentenvs.rollout.data.advantages import compute_advantages
from agentenvs.rollout.data.samples import trajectories_to_samples
from agentenvs.rollout.policies.base import PolicyError
from agentenvs.rollout.policies.hf import HFPolicy
from agentenvs.rollout.trainers.pytrio.handoff import to_pytrio_datums
from agentenvs.rollout.trainers.pytrio.sampling_policy import (
    PyTrioSamplingPolicy,
    pytrio_stop_reason,
)

EXAMPLE = EXAMPLES / "pytrio_grpo.py"
NO_LIMITS = TrainingLimits(max_batch_size=None, max_tokens_per_request=None, max_seq_len=None)


@pytest.fixture(scope="module")
def sampler(tmp_path_factory, tokenizer):
    directory = save_tiny_model(tmp_path_factory.mktemp("tiny-pytrio"), tokenizer)
    return HFPolicy(str(directory), tokenizer).sampler


@pytest.fixture
def actor(sampler):
    log = ActorLog()
    with serve(make_actor_app(sampler, log)) as url:
        yield url, log


@pytest.fixture
def client(actor):
    url, _ = actor
    with pytrio_sampling_client(url) as sampling_client:
        yield sampling_client


def guess_config():
    # Short turns that may be cut off: the cut text still reaches the task, so
    # episodes run several turns with environment messages in between.
    return make(
        "guess_number",
        tasks=3,
        limits={"max_turns": 3, "max_tokens_per_turn": 6, "on_truncated_action": "pass"},
    )


async def test_collector_samples_through_pytrio_sampling_client(actor, client, tokenizer, tmp_path):
    _, log = actor
    config = guess_config()
    policy = PyTrioSamplingPolicy(
        client, max_tokens=32, eos_token_ids=[tokenizer.eos_token_id], weights_version=7
    )
    builders = [config.group_builder(i, 2, tokenizer) for i in range(2)]
    out = tmp_path / "pytrio.jsonl"
    result = await collect(
        builders, policy, CollectOptions(progress=False), store=TrajectoryStore(out)
    )
    assert len(result.ok) == 2, [r.error for r in result.failed]

    stops = set()
    for record in read_records(out):
        assert record.provenance["policy"]["kind"] == "pytrio"
        assert record.provenance["policy"]["weights_version"] == 7
        assert record.provenance["policy"]["model"] == "tiny-local"
        for traj in record.group.trajectories:
            assert len(traj.transitions) >= 2  # multi-turn
            for tr in traj.transitions:
                # Exactly what the Actor sent back for exactly this context.
                sent = [s for s in log.answers[tuple(tr.ob)] if s.tokens == tr.ac.tokens]
                assert sent, "the action is not what the Actor sampled for this context"
                assert tr.ac.logprobs == sent[0].logprobs
                expected = pytrio_stop_reason(
                    sent[0].stop_reason, sent[0].tokens, [tokenizer.eos_token_id], 6
                )
                assert tr.ac.stop_reason == expected
                stops.add(tr.ac.stop_reason)
    assert "length" in stops

    body = log.requests[0]
    assert body["sampling_params"]["max_tokens"] == 6  # the env's per-turn cap wins
    assert body["sampling_params"]["stop"] == ["</guess>", "<|im_end|>"]
    assert "seed" not in body["sampling_params"]
    assert body["num_samples"] == 1 and body["return_token_logprobs"] is True

    # The same trajectories hand off to PyTRIO datums its own planner accepts.
    groups = [r.group for r in result.ok]
    samples = trajectories_to_samples(groups, compute_advantages(groups))
    datums = to_pytrio_datums(samples)
    plan = plan_training_batch(
        datums,
        loss_fn="importance_sampling",
        auto_shift=False,
        limits=NO_LIMITS,
        tokenizer_vocab_size=len(tokenizer),
    )
    assert plan.totals.total_samples == len(samples)
    first = datums[0].loss_fn_inputs
    assert first["logprobs"].data == samples[0].logprobs[1:]
    assert any(lp < 0 for lp in first["logprobs"].data)


async def test_transient_actor_errors_are_retried_by_pytrio(actor, client, tokenizer):
    _, log = actor
    log.fail_first = 2
    policy = PyTrioSamplingPolicy(client, max_tokens=4, seed=11, temperature=0.5)
    out = await policy([5, 6, 7], ["</guess>"])
    assert log.calls == 3 and len(out.tokens) <= 4
    (body,) = log.requests
    assert body["sampling_params"]["seed"] == 11
    assert body["sampling_params"]["temperature"] == 0.5


async def test_rejected_request_is_a_policy_error_and_a_failed_group(actor, client, tokenizer):
    _, log = actor
    log.status = 400
    policy = PyTrioSamplingPolicy(client, max_tokens=4)
    with pytest.raises(PolicyError, match="PyTRIO sampling failed"):
        await policy([5, 6, 7], [])
    result = await collect(
        [guess_config().group_builder(0, 1, tokenizer)],
        policy,
        CollectOptions(retries=1, progress=False),
    )
    (record,) = result.failed
    assert record.attempts == 2 and "PyTRIO sampling failed" in record.error


@pytest.mark.parametrize(
    ("raw", "tokens", "expected"),
    [
        ("length", [1, 2], "length"),
        ("max_tokens", [1, 2], "length"),
        ("stop", [1, 2], "stop"),
        ("stop", [1, 99], "eos"),
        ("eos", [1, 2], "eos"),
        ("", [1, 2, 3, 4], "length"),
        ("", [1, 2], "stop"),
        ("finished", [1, 2], "stop"),
    ],
)
def test_stop_reason_mapping(raw, tokens, expected):
    assert pytrio_stop_reason(raw, tokens, [99], max_tokens=4) == expected


def test_aborted_sequence_is_a_policy_error():
    with pytest.raises(PolicyError, match="aborted"):
        pytrio_stop_reason("aborted", [1], [], 4)


# ---- examples/pytrio_grpo.py: one synchronous GRPO step ----------------------------------------


def load_example():
    spec = importlib.util.spec_from_file_location("pytrio_grpo_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class RecordingTrainer:
    """Stand-in for PyTRIO's remote TrainingClient (a paid service): runs PyTRIO's own
    client-side planning on the datums, records the calls, and hands back a sampling
    client "for the new weights" (the same local one)."""

    def __init__(self, sampling_client, vocab_size: int) -> None:
        self.sampling_client = sampling_client
        self.vocab_size = vocab_size
        self.calls: list[tuple[str, object]] = []

    async def _done(self, value):
        return value

    async def forward_backward_async(self, data, loss_fn="cross_entropy", **_):
        from pytrio.types.forward.forward_backward_output import ForwardBackwardOutput

        plan = plan_training_batch(
            data, loss_fn=loss_fn, auto_shift=False, limits=NO_LIMITS,
            tokenizer_vocab_size=self.vocab_size,
        )  # fmt: skip
        self.calls.append(("forward_backward", (loss_fn, plan.totals.total_samples)))
        output = ForwardBackwardOutput(loss_fn_outputs=[], metrics={"loss:sum": 0.5})
        return self._done(output)

    async def optim_step_async(self, adam_params):
        self.calls.append(("optim_step", adam_params.learning_rate))
        return self._done(None)

    async def save_weights_and_get_sampling_client_async(self):
        self.calls.append(("save_weights", None))
        return self.sampling_client


class VarietyShapedGuess(GuessNumberConfig):
    """guess_number plus a group reward of 0.01 per distinct sampled token: a random
    model's attempts then differ in reward, so the GRPO step has something to train on."""

    async def group_rewards(self, trajectories, envs):
        return [
            (0.01 * len({tok for t in traj.transitions for tok in t.ac.tokens}), {})
            for traj in trajectories
        ]


async def test_example_grpo_step(actor, client, tokenizer, tmp_path):
    example = load_example()
    config = VarietyShapedGuess(
        tasks=3, limits={"max_turns": 3, "max_tokens_per_turn": 6, "on_truncated_action": "pass"}
    )
    builders = [config.group_builder(i, 3, tokenizer) for i in range(2)]
    trainer = RecordingTrainer(client, len(tokenizer))
    settings = example.GRPOSettings(max_tokens=16, learning_rate=3e-6)
    store = TrajectoryStore(tmp_path / "steps.jsonl")
    stats, new_sampler = await example.grpo_step(
        trainer,
        client,
        builders,
        weights_version=4,
        settings=settings,
        eos_token_ids=[tokenizer.eos_token_id],
        store=store,
        step=4,
    )
    assert new_sampler is client
    assert stats.weights_version == 4 and stats.groups == 2 and stats.failed_groups == 0
    assert stats.trained_groups >= 1
    assert [name for name, _ in trainer.calls] == ["forward_backward", "optim_step", "save_weights"]
    assert trainer.calls[0][1] == ("importance_sampling", stats.datums)
    assert trainer.calls[1][1] == 3e-6
    assert stats.loss_metrics == {"loss:sum": 0.5}
    records = read_records(tmp_path / "steps.jsonl")
    assert [r.key.split(":")[0] for r in records] == ["step4", "step4"]
    assert all(r.provenance["policy"]["weights_version"] == 4 for r in records)


def test_example_documents_its_usage():
    example = load_example()
    args = example.parse_args(["--base-model", "m", "--env", "retool", "--set", "max_turns=3"])
    assert (args.env, args.sets, args.steps) == ("retool", ["max_turns=3"], 10)
    assert "trio login" in EXAMPLE.read_text()
