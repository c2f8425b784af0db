"""Forks of guess_number and Search-R1: an identical past, an independent future.

Prefix identity is checked on the builtin vocabulary and on a real one (Qwen3's
151k-token vocabulary with its chat template, built offline in ``tests/vocab``).
"""

from __future__ import annotations

import pytest
from support.tree_helpers import SeededGuesser
from support.vocab import shared_vocabulary

from agentenvs.envs.registry import make
from agentenvs.envs.search_r1.retrievers import make_retriever
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.collect.tree import BranchSchedule, as_trees
from agentenvs.rollout.inspect.check import check_file


async def act(env, text: str):
    tokens = env.renderer.encode(text)
    if any(text.endswith(stop) for stop in env.stop_condition() if stop):
        return await env.step(tokens, extra={"stop_reason": "stop"})
    return await env.step(tokens + env.renderer.end_of_turn_tokens(), extra={"stop_reason": "eos"})


async def test_guess_number_fork_has_the_same_past_and_its_own_future(tokenizer):
    env = make("guess_number").make_env(0, tokenizer)
    await env.initial_observation()
    await act(env, "<guess>50</guess>")
    branch = await env.fork()
    bounds = (branch.task._lo, branch.task._hi)
    assert branch.context == env.context and branch.history == env.history
    assert branch.stop_condition() == env.stop_condition() and branch.turns == env.turns
    secret = env.task.secret
    wrong = 1 if secret != 1 else 2
    ended = await act(branch, f"<guess>{secret}</guess>")
    going = await act(env, f"<guess>{wrong}</guess>")
    assert ended.episode_done and ended.reward == 1.0
    assert not going.episode_done and not env.done
    assert len(env.history) == len(branch.history) + 2  # the original's turn, not the fork's
    assert (branch.task._lo, branch.task._hi) == bounds  # the original's guess stayed there


async def test_search_r1_fork_shares_the_retriever_and_nothing_it_changes(tokenizer):
    config = make("search_r1")
    env = config.make_env(0, tokenizer)
    await env.initial_observation()
    first = env.task.scripted_action("oracle")
    await act(env, first)
    branch = await env.fork()
    assert branch.task.config is env.task.config and branch.task.task is env.task.task
    assert make_retriever(branch.task.config.retriever) is make_retriever(env.task.config.retriever)
    assert branch.task.seen == env.task.seen and branch.task.seen is not env.task.seen
    final = await act(branch, "<answer> nobody knows </answer>")
    assert final.episode_done and env.task.searches == branch.task.searches == 1
    assert env.task.actions == [first] and len(branch.task.actions) == 2
    await act(env, env.task.scripted_action("oracle"))
    assert len(env.task.actions) == 2 and env.task.actions[1] != branch.task.actions[1]
    assert len(branch.task.actions) == 2  # the original's step did not reach the fork


@pytest.mark.parametrize("vocabulary", ["builtin", "qwen3"])
async def test_every_leaf_shares_its_parents_tokens_up_to_the_branch(
    vocabulary, tokenizer, tmp_path
):
    from agentenvs.rollout.collect.collector import CollectOptions, collect

    tok = tokenizer if vocabulary == "builtin" else shared_vocabulary(vocabulary)
    config = make("guess_number", limits={"max_turns": 5})
    builders = as_trees(
        [config.group_builder(i, 1, tok) for i in range(3)],
        BranchSchedule(branch_at=(2, 4), branch_factor=2),
    )
    store = TrajectoryStore(tmp_path / "trees.jsonl")
    result = await collect(
        builders, SeededGuesser(tok), CollectOptions(progress=False), store=store
    )
    assert len(result.ok) == 3
    for record in result.ok:
        tree = record.extra["tree"]
        for index, leaf in enumerate(tree["leaves"]):
            if leaf["parent"] is None:
                continue
            mine = record.group.trajectories[index].transitions
            theirs = record.group.trajectories[leaf["parent"]].transitions
            cut = leaf["branch_turn"] - 1
            mine_tokens = [t for tr in mine[:cut] for t in tr.ob + tr.ac.tokens] + mine[cut].ob
            theirs_tokens = [t for tr in theirs[:cut] for t in tr.ob + tr.ac.tokens]
            theirs_tokens += theirs[cut].ob
            assert mine_tokens == theirs_tokens
    report = check_file(store.path, tokenizer=tok)
    trees = [f for f in report.findings if f.detail.startswith("tree ")]
    assert [f.status for f in trees] == ["pass", "pass"], trees
