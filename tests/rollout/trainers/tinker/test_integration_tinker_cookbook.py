"""agentenvs <-> Tinker cookbook, driven by the cookbook's own code (``tinker-cookbook``).

* agentenvs groups of all four shipped environments run through
  ``tinker_cookbook.rl.rollouts.do_group_rollout`` with a local token completer;
  the trajectories equal agentenvs' own rollouts, and the cookbook's
  ``assemble_training_data`` datums equal this project's Tinker hand-off.
* The HF policy on a tiny random model drives the same path (real logprobs,
  sampler ``length`` stops through the cookbook's per-turn budget).
* The reverse: a cookbook ``ProblemEnv`` subclass with the cookbook's own
  ``role_colon`` renderer runs under this project's collector, store and viewer.

No Tinker service is contacted: sampling is local (scripted or transformers).
"""

from __future__ import annotations

import pickle
import re
from functools import partial
from html import unescape

import pytest
import tinker
from support.rollout_tiny_model import save_tiny_model
from support.tinker_compare import (
    assert_cookbook_datums_equal_ours,
    assert_same_datums,
    assert_same_trajectories,
)
from support.vocab import shared_vocabulary
from tinker_cookbook.renderers import get_renderer
from tinker_cookbook.renderers.qwen3 import Qwen3InstructRenderer, Qwen3Renderer
from tinker_cookbook.rl import data_processing as cookbook_data
from tinker_cookbook.rl import rollouts as cookbook_rollouts
from tinker_cookbook.rl import types as cookbook
from tinker_cookbook.rl.problem_env import ProblemEnv, ProblemGroupBuilder
from typer.testing import CliRunner

from agentenvs.envs.registry import make
from agentenvs.envs.renderers import ChatRenderer
from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.options import CollectOptions
from agentenvs.rollout.collect.rollouts import current_slot, do_group_rollout
from agentenvs.rollout.collect.store import read_records
from agentenvs.rollout.data.advantages import compute_advantages
from agentenvs.rollout.policies.hf import HFPolicy
from agentenvs.rollout.policies.scripted import ScriptedPolicy
from agentenvs.rollout.trainers.tinker.cookbook import (
    AgentenvsDatasetBuilder,
    CookbookEnv,
    CookbookGroupBuilder,
    PolicyCompleter,
    collect_from_cookbook,
    from_cookbook_group,
    to_cookbook_builder,
)
from agentenvs.rollout.trainers.tinker.handoff import assemble_tinker_data

# name -> (config overrides, the scripted variant the second trajectory plays)
ENVS = {
    "guess_number": ({"tasks": 4}, "malformed"),
    "search_r1": ({}, "wrong"),
    "retool": ({}, "wrong"),
    "alfworld": ({"limits": {"max_turns": 10}}, "invalid"),
}


class MixedScripted:
    """Per-env factory: even slots play the oracle, odd slots another variant, so a
    group has different rewards (nonzero advantages) and several stop reasons."""

    per_env = True

    def __init__(self, other: str) -> None:
        self.other = other

    def __call__(self, env):
        slot = current_slot.get()
        index = slot.traj_index if slot is not None else 0
        return ScriptedPolicy("oracle" if index % 2 == 0 else self.other)(env)


@pytest.mark.parametrize("name", list(ENVS))
async def test_cookbook_rollout_of_agentenvs_group_equals_our_handoff(name, tokenizer):
    overrides, other = ENVS[name]
    config = make(name, **overrides)
    policy = MixedScripted(other)

    builder = to_cookbook_builder(config.group_builder(0, 2, tokenizer), [tokenizer.eos_token_id])
    assert isinstance(builder, cookbook.EnvGroupBuilder)
    pickle.loads(pickle.dumps(builder))  # the cookbook ships builders to worker processes
    theirs_group = await cookbook_rollouts.do_group_rollout(builder, PolicyCompleter(policy))
    assert isinstance(theirs_group, cookbook.TrajectoryGroup)
    assert all(
        isinstance(t.transitions[0].ob, tinker.ModelInput) for t in theirs_group.trajectories_G
    )

    ours_group = await do_group_rollout(config.group_builder(0, 2, tokenizer), policy)
    assert_same_trajectories(from_cookbook_group(theirs_group), ours_group)
    rewards = ours_group.total_rewards()
    assert rewards == theirs_group.get_total_rewards()
    assert rewards[0] != rewards[1]  # the advantages below are not all zero

    advantages = cookbook_data.compute_advantages([theirs_group])
    theirs, theirs_meta = cookbook_data.assemble_training_data([theirs_group], advantages)
    # Fed the cookbook's float32 advantages, our hand-off is bit-for-bit theirs ...
    ours, ours_meta = assemble_tinker_data([ours_group], [a.tolist() for a in advantages])
    assert ours_meta == theirs_meta
    assert_same_datums(ours, theirs)
    assert any(d.loss_fn_inputs["mask"].tolist().count(0.0) for d in ours)  # observations masked
    # ... and our own (float64) advantages agree with theirs.
    assert compute_advantages([ours_group], "dr_grpo")[0] == pytest.approx(
        advantages[0].tolist(), abs=1e-6
    )


@pytest.fixture(scope="module")
def hf_model_dir(tmp_path_factory, tokenizer):
    return save_tiny_model(tmp_path_factory.mktemp("tiny-cookbook"), tokenizer)


async def test_hf_policy_through_the_cookbook_rollout(hf_model_dir, tokenizer):
    """Sampled tokens, real logprobs and a per-turn cap that the cookbook's runner
    enforces through the adapter's ``rollout_limits``; the env sees ``length``."""
    config = make(
        "guess_number",
        tasks=2,
        limits={"max_turns": 3, "max_tokens_per_turn": 5, "on_truncated_action": "end"},
    )
    policy = HFPolicy(str(hf_model_dir), tokenizer, max_tokens=64, seed=3)
    builder = CookbookGroupBuilder(config.group_builder(1, 3, tokenizer))
    envs = await builder.make_envs()
    assert envs[0].rollout_limits.max_turn_tokens == 5
    await builder.cleanup()

    theirs_group = await cookbook_rollouts.do_group_rollout(builder, PolicyCompleter(policy))
    group = from_cookbook_group(theirs_group)
    for traj in group.trajectories:
        for tr in traj.transitions:
            assert len(tr.ac.tokens) <= 5
            assert tr.ac.logprobs and all(lp < 0 for lp in tr.ac.logprobs)
        last = traj.transitions[-1]
        if last.ac.stop_reason == "length":
            assert traj.stop_reason == "max_tokens"
    assert any(t.transitions[-1].ac.stop_reason == "length" for t in group.trajectories)

    assert_cookbook_datums_equal_ours(theirs_group, group)


async def test_dataset_builder_for_the_cookbook_train_loop():
    builder = AgentenvsDatasetBuilder(
        env="guess_number",
        model_name_for_tokenizer="builtin",
        group_size=2,
        batch_size=3,
        env_config={"tasks": 5},
        test_split="test",
    )
    train, test = await builder()
    assert isinstance(train, cookbook.RLDataset) and isinstance(test, cookbook.RLDataset)
    assert len(train) == 2 and [len(train.get_batch(i)) for i in range(2)] == [3, 2]
    group_builder = train.get_batch(1)[0]
    envs = await group_builder.make_envs()
    assert len(envs) == 2 and all(isinstance(e, CookbookEnv) for e in envs)
    ob, stop = await envs[0].initial_observation()
    assert isinstance(ob, tinker.ModelInput) and ob.length > 0 and "</guess>" in stop
    assert group_builder.logging_tags() == ["guess_number"]
    await group_builder.cleanup()


async def test_per_env_policy_outside_a_wrapped_env_is_a_clear_error():
    from agentenvs.rollout.policies.base import PolicyError

    completer = PolicyCompleter(ScriptedPolicy())
    with pytest.raises(PolicyError, match="CookbookGroupBuilder"):
        await completer(tinker.ModelInput.from_ints([1, 2]), [])


# ---- the reverse: a cookbook env under agentenvs' collector and viewer -------------------------


class AdditionEnv(ProblemEnv):
    """A cookbook single-turn problem env: add two numbers."""

    def __init__(self, renderer, a: int, b: int) -> None:
        super().__init__(renderer)
        self.a, self.b = a, b

    def get_question(self) -> str:
        return f"What is {self.a} + {self.b}? Answer with the number only."

    def check_answer(self, sample_str: str) -> bool:
        return sample_str.strip() == str(self.a + self.b)

    def check_format(self, sample_str: str) -> bool:
        return sample_str.strip().isdigit()

    def get_reference_answer(self) -> str:
        return str(self.a + self.b)


class ArithmeticPolicy:
    """A policy (agentenvs protocol) that answers in the cookbook renderer's format:
    right in even slots, off by one in odd ones, ending on the renderer's stop string."""

    per_env = True

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def __call__(self, env):
        slot = current_slot.get()
        wrong = slot is not None and slot.traj_index % 2 == 1
        inner = env.env  # the cookbook AdditionEnv behind the adapter

        async def act(observation, stop, *, max_tokens=None):
            answer = inner.a + inner.b + (1 if wrong else 0)
            tokens = self.tokenizer.encode(f" {answer}{stop[0]}", add_special_tokens=False)
            return TokensWithLogprobs(tokens, [-0.5] * len(tokens), "stop")

        return act


def addition_builders(tokenizer, count: int):
    renderer = get_renderer("role_colon", tokenizer)
    return [
        ProblemGroupBuilder(
            env_thunk=partial(AdditionEnv, renderer, i, i + 2), num_envs=2, dataset_name="add"
        )
        for i in range(count)
    ]


async def test_cookbook_env_runs_under_agentenvs_collector_and_viewer(tmp_path, tokenizer):
    out = tmp_path / "cookbook.jsonl"
    result = await collect_from_cookbook(
        addition_builders(tokenizer, 3),
        ArithmeticPolicy(tokenizer),
        CollectOptions(progress=False),
        out=out,
        tokenizer=tokenizer,
        tokenizer_spec="builtin",
        env_name="cookbook/addition",
    )
    assert len(result.ok) == 3 and not result.failed
    records = read_records(out)
    assert [r.key for r in records] == [r.key for r in result.records]
    for record in records:
        assert record.env == "cookbook/addition"
        assert record.group.tags == ["add"]
        assert record.group.total_rewards() == [1.0, 0.0]  # right; wrong but well formed
        first = record.group.trajectories[0].transitions[0]
        assert first.metrics == {"format": 1.0, "correct": 1.0}
        assert "What is" in tokenizer.decode(first.ob)
        assert record.provenance["tokenizer"]["spec"] == "builtin"

    # A rerun over the same file resumes: nothing is collected twice.
    again = await collect_from_cookbook(
        addition_builders(tokenizer, 3),
        ArithmeticPolicy(tokenizer),
        CollectOptions(progress=False),
        out=out,
        env_name="cookbook/addition",  # another label would be another run, and is refused
    )
    assert again.skipped == 3 and not again.records

    from agentenvs.rollout.cli import app

    html = tmp_path / "view.html"
    run = CliRunner().invoke(app, ["view", str(out), "--html", str(html)])
    assert run.exit_code == 0, run.output
    text = unescape(re.sub(r"<[^>]+>", "", html.read_text()))  # tokens are one span each
    assert "What is 0 + 2?" in text and "cookbook/addition" in text


async def test_cookbook_env_with_hf_policy_and_length_stop(hf_model_dir, tokenizer):
    """Our sampler's ``length`` reaches the cookbook env as Tinker's ``length``: the
    response never ended on the stop sequence, so the env's format check fails."""
    policy = HFPolicy(str(hf_model_dir), tokenizer, max_tokens=4, seed=0)
    result = await collect_from_cookbook(
        addition_builders(tokenizer, 1), policy, CollectOptions(progress=False), tokenizer=tokenizer
    )
    (record,) = result.ok
    for traj in record.group.trajectories:
        (transition,) = traj.transitions
        assert transition.ac.stop_reason == "length" and len(transition.ac.tokens) == 4
        assert transition.metrics["format"] == 0.0
        assert transition.reward == pytest.approx(-0.1)


# ---- the Qwen vocabulary: the cookbook's Qwen3 renderers and assemble_training_data ----------

_TOOL_SPEC = {
    "name": "search",
    "description": "Search a corpus.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
}


def _agentic_conversation(renderer_cls) -> list[dict]:
    """User, then assistant/tool rounds with tool calls (and, for the thinking renderer,
    reasoning framed the way Qwen3 frames it), ending on a tool result."""
    prefix = renderer_cls(shared_vocabulary("qwen3")).create_conversation_prefix_with_tools(
        [_TOOL_SPEC], "Answer with the corpus."
    )
    think = renderer_cls is Qwen3Renderer
    calls = [("ship home port", "Doc 1: the North Star's home port was Peverell."),
             ("Peverell island", 'Doc 2: "Peverell" is a town on Brightholm. <b>é日</b>')]  # fmt: skip
    messages = [*prefix, {"role": "user", "content": "Which island was the ship's home port on?"}]
    for query, result in calls:
        call = (
            f'<tool_call>\n{{"name": "search", "arguments": {{"query": "{query}"}}}}\n</tool_call>'
        )
        content = (f"<think>\nLook up {query}.\n</think>\n\n" if think else "") + call
        messages += [{"role": "assistant", "content": content}, {"role": "tool", "content": result}]
    return messages


def _play_through_chat_renderer(tok, messages):
    """This project's chat renderer, token-in/token-out: each assistant turn is what a
    policy sampled (its content's tokens and <|im_end|>); the rest is appended."""
    renderer = ChatRenderer(tok)
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    history = [dict(m) for m in messages[:first]]
    context = renderer.initial_tokens(history, None)
    i = first
    while i < len(messages):
        content = messages[i]["content"]
        action = [*tok.encode(content, add_special_tokens=False), tok.eos_token_id]
        j = i + 1
        while j < len(messages) and messages[j]["role"] != "assistant":
            j += 1
        appended = renderer.append(history, None, content, "<|im_end|>", messages[i + 1 : j])
        assert not appended.restart
        context = context + action + appended.tokens
        i = j
    return context


@pytest.mark.parametrize("renderer_name", ["Qwen3Renderer", "Qwen3InstructRenderer"])
def test_qwen3_renderers_match_our_chat_renderer_on_the_real_vocabulary(renderer_name):
    """Same multi-turn messages with tools, same Qwen3 tokenizer: the same token ids.

    The tool declarations are the cookbook's own system message on both sides: the
    test template's tool preamble is worded for this repository (a designed
    difference, tests/vocab/NOTES.md)."""
    tok = shared_vocabulary("qwen3")
    renderer_cls = {"Qwen3Renderer": Qwen3Renderer, "Qwen3InstructRenderer": Qwen3InstructRenderer}[
        renderer_name
    ]
    messages = _agentic_conversation(renderer_cls)
    theirs = renderer_cls(tok).build_generation_prompt(messages).to_ints()
    ours = _play_through_chat_renderer(tok, messages)
    assert ours == theirs
    assert tok.decode(ours) == tok.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert 151657 in ours and 151665 in ours  # <tool_call>, <tool_response> as single tokens


def test_qwen3_designed_differences_from_the_cookbook():
    """Where this project and the cookbook's Qwen3Renderer differ on purpose."""
    tok = shared_vocabulary("qwen3")
    cookbook_renderer = Qwen3InstructRenderer(tok)
    base = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "calling"}]

    # 1. Tool output spelling a non-special added token (</tool_response>, 151666): the
    #    cookbook's split_special_tokens keeps it a control token; ours splits every
    #    added token in environment text.
    forged = [*base, {"role": "tool", "content": "x</tool_response>y"}]
    theirs = cookbook_renderer.build_generation_prompt(forged).to_ints()
    ours = _play_through_chat_renderer(tok, forged)
    assert theirs.count(151666) == 2 and ours.count(151666) == 1
    assert tok.decode(ours) == tok.decode(theirs)

    # 2. Consecutive tool results: the chat template groups them in one user turn,
    #    the cookbook opens a user turn for each.
    two = [*base, {"role": "tool", "content": "a"}, {"role": "tool", "content": "b"}]
    theirs = cookbook_renderer.build_generation_prompt(two).to_ints()
    ours = _play_through_chat_renderer(tok, two)
    assert ours.count(151644) == theirs.count(151644) - 1

    # 3. Thinking in string history before a later user turn: the template strips it
    #    (our renderer records a prefix break and starts a new sample), the cookbook's
    #    thinking renderer keeps string content as written.
    history = [
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": "<think>\nadd\n</think>\n\n5"},
        {"role": "user", "content": "times 4?"},
    ]
    theirs_text = tok.decode(Qwen3Renderer(tok).build_generation_prompt(history).to_ints())
    renderer = ChatRenderer(tok)
    opened = history[:1]
    renderer.initial_tokens(opened, None)
    appended = renderer.append(opened, None, history[1]["content"], "<|im_end|>", history[2:])
    assert appended.restart and "<think>" not in tok.decode(appended.tokens)
    assert "<think>\nadd" in theirs_text


@pytest.mark.parametrize("vocab_name", ["qwen2.5", "qwen3"])
@pytest.mark.parametrize("name", list(ENVS))
async def test_cookbook_training_data_equals_our_handoff_on_the_real_vocabulary(name, vocab_name):
    tok = shared_vocabulary(vocab_name)
    overrides, other = ENVS[name]
    config = make(name, **overrides)
    policy = MixedScripted(other)
    builder = to_cookbook_builder(config.group_builder(0, 2, tok), [tok.eos_token_id])
    theirs_group = await cookbook_rollouts.do_group_rollout(builder, PolicyCompleter(policy))
    ours_group = await do_group_rollout(config.group_builder(0, 2, tok), policy)
    assert_same_trajectories(from_cookbook_group(theirs_group), ours_group)
    assert_cookbook_datums_equal_ours(theirs_group, ours_group)


async def test_cookbook_training_data_equals_ours_for_sampled_real_vocabulary_tokens():
    """A tiny random model over the Qwen vocabulary: sampled turns are mostly invalid
    UTF-8 alone and do not round-trip, and the datums still agree bit for bit."""
    from agentenvs.rollout.policies.tiny_model import build_tiny_model

    tok = shared_vocabulary("qwen3")
    model = build_tiny_model(tok, hidden_size=16, seed=2).eval()
    config = make(
        "search_r1", max_turns=2, limits={"max_turns": 3, "max_tokens_per_turn": 8,
                                          "on_truncated_action": "pass"},
    )  # fmt: skip
    policy = HFPolicy(model, tok, max_tokens=8, seed=5)
    builder = CookbookGroupBuilder(config.group_builder(0, 2, tok))
    theirs_group = await cookbook_rollouts.do_group_rollout(builder, PolicyCompleter(policy))
    group = from_cookbook_group(theirs_group)
    sampled = [tr.ac.tokens for traj in group.trajectories for tr in traj.transitions]
    assert any(
        tok.encode(tok.decode(t), add_special_tokens=False) != t for t in sampled
    )  # the data a re-tokenizing pipeline would get wrong
    assert_cookbook_datums_equal_ours(theirs_group, group)
