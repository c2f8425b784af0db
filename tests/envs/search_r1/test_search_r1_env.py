"""The Search-R1 environment end to end with the in-process bm25 retriever."""

from __future__ import annotations

import json
import pickle
import re

import pytest
from support.search_r1_helpers import drive, masked_spans

from agentenvs.envs.data_files import DataError
from agentenvs.envs.registry import EnvConfigError, make, register_gymnasium
from agentenvs.envs.search_r1 import prompts
from agentenvs.envs.search_r1.config import SearchR1Config
from agentenvs.envs.search_r1.questions import load_tasks, shipped_tasks
from agentenvs.envs.search_r1.world import write_files
from agentenvs.envs.types import StopReason

INFO_BLOCK = re.compile(r"\n\n<information>(.*)</information>\n\n", re.DOTALL)


def _all_tasks(cfg: SearchR1Config) -> list[tuple[str, int]]:
    return [(s, i) for s in ("train", "test") for i in range(cfg.num_tasks(s))]


def test_shipped_data_is_what_the_generator_writes(tmp_path):
    counts = write_files(tmp_path)
    assert counts["questions_train.jsonl"] + counts["questions_test.jsonl"] >= 100
    assert 200 <= counts["corpus.jsonl"] <= 600
    for name in counts:
        assert (tmp_path / name).read_bytes() == _shipped_bytes(name)
    questions = shipped_tasks("train") + shipped_tasks("test")
    assert len({q.id for q in questions}) == len(questions)
    two_hop = [q for q in questions if len(q.hops) == 2]
    assert len(two_hop) >= 30


def _shipped_bytes(name: str) -> bytes:
    from agentenvs.envs.search_r1.corpus import data_path

    return data_path(name).read_bytes()


async def test_oracle_answers_every_shipped_question_with_bm25(tokenizer):
    cfg = SearchR1Config()
    for split, index in _all_tasks(cfg):
        task = cfg.tasks(split)[index]
        ep = await drive(cfg.make_env(index, tokenizer, split))
        final = ep.final.metrics
        assert ep.reward == 1.0, (task.question, ep.final.logs)
        assert final["stop/completed"] == 1 and final["well_formed"] == 1
        assert final["searches"] == len(task.hops)  # two-hop questions search twice


async def test_masks_cover_exactly_the_information_blocks(tokenizer):
    cfg = SearchR1Config()
    two_hop = next(i for i, t in enumerate(cfg.tasks()) if len(t.hops) == 2)
    ep = await drive(cfg.make_env(two_hop, tokenizer))
    spans = masked_spans(ep)
    assert len(spans) == 2
    for start, end in spans:
        text = tokenizer.decode(ep.context[start:end])
        assert INFO_BLOCK.fullmatch(text), text
        assert text.count("Doc ") == 3 and "Doc 1(Title: " in text
    # Everything else after the prompt is what the policy sampled: think/search/answer text.
    sampled_text = tokenizer.decode([t for t, s in zip(ep.context, ep.sampled, strict=True) if s])
    assert "<information>" not in sampled_text
    assert sampled_text.count("<search>") == 2 and sampled_text.count("<answer>") == 1
    assert ep.stops[0] == ["</search>", "</answer>", tokenizer.eos_token]


async def test_tool_call_protocol_oracle_and_masks(tokenizer):
    cfg = SearchR1Config(protocol="tool_call")
    assert cfg.renderer_kind == "chat"
    for split, index in _all_tasks(cfg)[:40]:
        ep = await drive(cfg.make_env(index, tokenizer, split))
        assert ep.reward == 1.0
        task = cfg.tasks(split)[index]
        spans = masked_spans(ep)
        assert len(spans) == len(task.hops)
        for start, end in spans:
            text = tokenizer.decode(ep.context[start:end])
            # The template ends the turn with a newline after the sampled <|im_end|>.
            assert text.startswith('\n<|im_start|>tool\n{"result": "Doc 1 (Title: ')
            assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    prompt = tokenizer.decode(ep.context[: ep.prompt_len])
    assert '"name": "search"' in prompt and "query_list" in prompt


@pytest.mark.parametrize("protocol", ["tags", "tool_call"])
async def test_wrong_answer_scores_zero(tokenizer, protocol):
    cfg = SearchR1Config(protocol=protocol)
    ep = await drive(cfg.make_env(3, tokenizer), "wrong")
    assert ep.reward == 0.0
    assert ep.final.metrics["stop/completed"] == 1
    assert ep.final.metrics["answered"] == 1
    assert ep.final.logs["answer"] == "nobody knows"


@pytest.mark.parametrize("protocol", ["tags", "tool_call"])
async def test_malformed_actions_use_up_the_turns_then_stop(tokenizer, protocol):
    cfg = SearchR1Config(protocol=protocol, max_turns=2)
    ep = await drive(cfg.make_env(0, tokenizer), "malformed")
    final = ep.final.metrics
    assert ep.reward == 0.0  # the golden answer is in the text, but not in <answer>
    assert final[f"stop/{StopReason.MAX_TURNS}"] == 1
    assert final["turns"] == 3 and final["invalid_actions"] == 2 and final["searches"] == 0
    last_observation = tokenizer.decode(ep.context[masked_spans(ep)[-1][0] :])
    if protocol == "tags":
        assert "not a valid action" in last_observation
        assert prompts.LAST_TURN_HINT in last_observation
        assert ep.stops[-1] == ["</answer>", tokenizer.eos_token]  # searching disabled
        assert ep.stops[0][0] == "</search>"
    else:
        assert prompts.LAST_TURN_TOOL_HINT in last_observation


async def test_search_on_the_last_turn_is_not_run():
    cfg = SearchR1Config(max_turns=1)
    env = cfg.make_text_env(0)
    step = await env.step("<search> Peverell </search>", stop_reason="stop")
    assert not step.done and prompts.LAST_TURN_HINT in step.observation
    assert step.next_stop == ["</answer>"]
    step = await env.step("<search> again </search> <answer> Kavesh </answer>", stop_reason="stop")
    assert step.done and step.stop_reason == StopReason.MAX_TURNS
    assert step.metrics["searches"] == 1
    # Search-R1's rule: the last <answer> anywhere in the response is scored.
    assert step.logs["answer"] == "Kavesh"


async def test_zero_search_turns_means_answer_at_once():
    cfg = SearchR1Config(max_turns=0)
    env = cfg.make_text_env(0)
    assert env.stop_sequences() == ["</answer>"]
    step = await env.step("<search> q </search>", stop_reason="stop")
    assert step.done and step.metrics["searches"] == 0


async def test_empty_query_and_no_hits_are_answered_not_raised():
    env = SearchR1Config().make_text_env(0)
    step = await env.step("<search>   </search>", stop_reason="stop")
    assert prompts.NO_RESULTS in step.observation
    step = await env.step("<search> zzzqqq xyzzy </search>", stop_reason="stop")
    assert prompts.NO_RESULTS in step.observation


async def test_observation_is_capped_in_tokens(tokenizer):
    cfg = SearchR1Config(max_obs_tokens=48)
    ep = await drive(cfg.make_env(0, tokenizer))
    assert ep.reward in (0.0, 1.0)
    for start, end in masked_spans(ep):
        assert end - start <= 48
        assert tokenizer.decode(ep.context[start:end]).endswith("</information>\n\n")
    assert ep.final.metrics["obs_truncated"] >= 1


async def test_format_reward_mode(tokenizer):
    cfg = SearchR1Config(reward="format", format_weight=0.3)
    assert (await drive(cfg.make_env(1, tokenizer))).reward == 1.0
    assert (await drive(cfg.make_env(1, tokenizer), "wrong")).reward == pytest.approx(0.3)
    assert (await drive(cfg.make_env(1, tokenizer), "malformed")).reward == 0.0


def test_registry_and_config_checks():
    cfg = make("search_r1", protocol="tool_call", retriever={"topk": 5}, max_turns=2)
    assert isinstance(cfg, SearchR1Config)
    assert cfg.retriever.topk == 5 and cfg.limits.max_turns == 3
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    with pytest.raises(EnvConfigError, match="retriever"):
        make("search_r1", retriever={"kind": "elastic"})
    with pytest.raises(EnvConfigError, match="max_turns"):
        make("search_r1", max_turns=4, limits={"max_turns": 3})
    with pytest.raises(EnvConfigError, match="question"):
        make("search_r1", prompt_template="no field")


def test_gymnasium_wrapper_runs_the_oracle_text():
    import gymnasium

    register_gymnasium()
    env = gymnasium.make("agentenvs/SearchR1-v0")
    prompt, _ = env.reset(options={"task_index": 1})
    assert "Question:" in prompt
    task = env.unwrapped.config.tasks()[1]
    reward, done = 0.0, False
    for _ in range(6):
        action = env.unwrapped._task.scripted_action("oracle")
        _, reward, done, truncated, _ = env.step(action)
        if done or truncated:
            break
    assert done and reward == 1.0, task.question
    env.close()


def test_user_question_files(tmp_path):
    rows = [
        {
            "id": "a",
            "question": "Who built the ship Saltwind?",
            "golden_answers": "Ottilie Galbraith",
        },
        {"question": "Where is Peverell?", "answers": ["Brightholm"]},
    ]
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = load_tasks(path)
    assert [t.golden_answers for t in tasks] == [("Ottilie Galbraith",), ("Brightholm",)]
    assert tasks[1].id == "1"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "no answer"}) + "\n")
    with pytest.raises(DataError, match="golden"):
        load_tasks(bad)
    with pytest.raises(DataError, match="not found"):
        load_tasks(tmp_path / "missing.jsonl")


async def test_search_r1_parquet_layout(tmp_path, tokenizer):
    import pyarrow as pa
    import pyarrow.parquet as pq

    prompt = (
        "Custom instructions. Use <search> and <answer>. Question: Who built the ship Saltwind?\n"
    )
    table = pa.Table.from_pylist(
        [
            {  # Search-R1's nq_search.py layout, without the raw question column
                "data_source": "nq",
                "prompt": [{"role": "user", "content": prompt}],
                "ability": "fact-reasoning",
                "reward_model": {
                    "style": "rule",
                    "ground_truth": {"target": ["Ottilie Galbraith"]},
                },
                "extra_info": {"split": "train", "index": 7},
            }
        ]
    )
    path = tmp_path / "train.parquet"
    pq.write_table(table, path)
    cfg = SearchR1Config(train_file=str(path))
    assert cfg.num_tasks() == 1 and cfg.task_id(0) == "train/7"
    ep = await drive(cfg.make_env(0, tokenizer))
    assert tokenizer.decode(ep.context[: ep.prompt_len]).count(prompt) == 1  # used verbatim
    assert ep.reward == 1.0 and ep.final.metrics["searches"] == 1


async def test_group_rollout_through_the_collector_masks_observations(tokenizer):
    from agentenvs.rollout.collect.rollouts import do_group_rollout
    from agentenvs.rollout.data.advantages import compute_advantages
    from agentenvs.rollout.data.samples import trajectories_to_samples
    from agentenvs.rollout.policies import make_policy

    cfg = SearchR1Config()
    two_hop = next(i for i, t in enumerate(cfg.tasks()) if len(t.hops) == 2)
    builder = cfg.group_builder(two_hop, 4, tokenizer)
    group = await do_group_rollout(builder, make_policy("scripted", variant="oracle"))
    assert group.total_rewards() == [1.0] * 4
    samples = trajectories_to_samples([group], compute_advantages([group]))
    assert len(samples) == 4
    for sample in samples:
        unmasked = [t for t, m in zip(sample.tokens, sample.loss_mask, strict=True) if m]
        masked_after_prompt = [
            t
            for t, m in zip(
                sample.tokens[sample.prompt_length :],
                sample.loss_mask[sample.prompt_length :],
                strict=True,
            )
            if not m
        ]
        info = tokenizer.decode(masked_after_prompt)
        assert info.count("<information>") == 2 and info.count("</information>") == 2
        assert "<information>" not in tokenizer.decode(unmasked)


async def test_tool_turn_with_several_calls_answers_each():
    env = SearchR1Config(protocol="tool_call", max_queries_per_turn=3).make_text_env(0)
    call = json.dumps(
        {"name": "search", "arguments": {"query_list": ["Peverell", "Saltwind ship"]}}
    )
    text = f"<tool_call>{call}</tool_call>\n<tool_call>{{oops</tool_call>"
    step = await env.step(text, stop_reason="eos")
    assert [m["role"] for m in step.observation] == ["tool", "tool"]
    first = json.loads(step.observation[0]["content"])["result"]
    assert first.count("\n---\n") == 1 and first.startswith("Doc 1 (Title: ")
    assert "error" in json.loads(step.observation[1]["content"])
    assert step.metrics["searches"] == 1 and not env.well_formed
