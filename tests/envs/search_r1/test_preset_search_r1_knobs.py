"""preset=search_r1, knob by knob, over hand-written actions, against the original's rule.

Each expected value is what Search-R1 (PeterGriffinJin/Search-R1 at a14dc3a) computes for
the same text, worked out by hand from the cited lines (docs/search_r1.md has the table):

* reward: ``verl/utils/reward_score/qa_em.py`` ``extract_solution`` (lines 62-82: the last
  ``<answer>`` of the decoded prompt+response, none when there are fewer than two) read by
  ``compute_score_em`` (lines 85-110), over ``verl/trainer/main_ppo.py`` lines 60-78
  (``sequences_str`` is the decoded prompt plus the response, retrieved blocks included);
* turns: ``scripts/nq_hotpotqa/v0.2/train_grpo.sh`` line 76 (``max_turns=4``), line 34
  (``max_response_length=500``, each generation's cap); ``llm_agent/generation.py`` lines
  234-310 (``max_turns`` searching turns, then one with ``do_search=False`` and no hint).
"""

from __future__ import annotations

import json

import pytest
from support.preset_play import encode
from support.preset_play import play_turns as play

from agentenvs.envs.registry import EnvConfigError, make
from agentenvs.envs.search_r1.prompts import LAST_TURN_HINT
from agentenvs.envs.search_r1.reward import extract_answer, score_response

# ---- the reward rule on hand-written texts (qa_em.extract_solution) --------------------

PROMPT_TWO = "Write <answer> and </answer> around it, e.g. <answer> Ada Lovelace </answer>. Q: x\n"
"""A prompt with two blocks, as Search-R1's own prompt has (``make_prefix``)."""
PROMPT_NONE = "Answer the question. Q: x\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (PROMPT_TWO + "<think>no idea</think>", "Ada Lovelace"),  # no answer: the prompt's
        (PROMPT_NONE + "<answer> Paris </answer>", None),  # one block only: nothing graded
        (PROMPT_NONE + "<answer> Rome </answer> then <answer> Paris </answer>", "Paris"),
        (PROMPT_TWO + "<answer> Paris </answer>\n\n<information>Doc 1 <answer> Rome </answer>"
         "</information>", "Rome"),  # a block inside retrieved text counts, and is last
        (PROMPT_TWO + "<answer></answer>", ""),  # an empty block is an (empty) answer
        (PROMPT_NONE + "<answer> open", None),
    ],
)  # fmt: skip
def test_the_answer_is_the_last_block_of_at_least_two(text, expected):
    assert extract_answer(text, min_blocks=2) == expected


def test_em_of_the_extracted_answer_as_compute_score_em():
    golden = ["Ada Lovelace", "Augusta Ada King"]
    # No answer from the model: the prompt's own example is graded, and here it is right.
    assert score_response(PROMPT_TWO + "<think>hm</think>", golden, min_blocks=2).reward == 1.0
    assert score_response(PROMPT_TWO + "<think>hm</think>", golden).reward == 1.0
    assert score_response(PROMPT_NONE + "<answer> the ada lovelace! </answer>", golden,
                          min_blocks=2).reward == 0.0  # fmt: skip
    assert score_response(PROMPT_NONE + "<answer> the ada lovelace! </answer>", golden).reward == 1


# ---- the rule inside an episode ---------------------------------------------------------


@pytest.fixture
def retrieved_answer(tmp_path, monkeypatch):
    """A corpus whose passage holds an <answer> block, and one question about it."""
    monkeypatch.setenv("AGENTENVS_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.jsonl"
    rows = [
        {"id": "0", "contents": '"Brightholm"\nBrightholm harbour <answer> Wrongtown </answer>.'},
        {"id": "1", "contents": '"Marrowen"\nMarrowen keeps sheep on its chalk cliffs.'},
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    questions = tmp_path / "q.jsonl"
    row = {"id": "q0", "question": "Which harbour?", "golden_answers": ["Brightholm"]}
    questions.write_text(json.dumps(row) + "\n")
    return {"retriever": {"corpus": str(corpus)}, "train_file": str(questions)}


async def test_an_answer_in_retrieved_text_counts_when_it_is_last(tokenizer, retrieved_answer):
    searched = [("<search> Brightholm harbour </search>", "stop")]
    # An answer after the retrieved block is the last one: it is graded.
    preset = make("search_r1", preset="search_r1", **retrieved_answer)
    results = await play(
        preset.make_env(0, tokenizer), [*searched, ("<answer> Brightholm </answer>", "stop")]
    )
    assert results[-1].reward == 1.0
    # A final turn without a block leaves the retrieved one last: Search-R1 grades
    # "Wrongtown" (0); our default reads only the model's text and finds no answer.
    cfg = make("search_r1", preset="search_r1", max_turns=1, **retrieved_answer)
    results = await play(
        cfg.make_env(0, tokenizer),
        [("<search> Brightholm harbour </search>", "stop"), ("I am not sure.", "eos")],
    )
    assert results[-1].logs["answer"] == "Wrongtown" and results[-1].reward == 0.0
    mine = make("search_r1", max_turns=1, **retrieved_answer)
    results = await play(
        mine.make_env(0, tokenizer),
        [("<search> Brightholm harbour </search>", "stop"), ("I am not sure.", "eos")],
    )
    assert results[-1].logs["answer"] == "" and results[-1].metrics["answered"] == 0


async def test_a_prompt_without_example_blocks_leaves_one_answer_ungraded(tokenizer):
    cfg = make("search_r1", preset="search_r1", prompt_template="Question: {question}\n")
    golden = cfg.tasks()[0].golden_answers[0]
    (result,) = await play(cfg.make_env(0, tokenizer), [(f"<answer> {golden} </answer>", "stop")])
    assert result.episode_done and result.reward == 0.0  # one block in all: no answer
    ours = make("search_r1", prompt_template="Question: {question}\n")
    (result,) = await play(ours.make_env(0, tokenizer), [(f"<answer> {golden} </answer>", "stop")])
    assert result.reward == 1.0


# ---- turns, the per-turn cap, the last-turn hint --------------------------------------


async def test_four_searching_turns_then_one_answer_turn_without_a_hint(tokenizer):
    cfg = make("search_r1", preset="search_r1")
    env = cfg.make_env(0, tokenizer)
    searches = [("<search> Serran Isles </search>", "stop")] * 4
    results = await play(env, [*searches, ("<search> again </search>", "stop")])
    assert [r.episode_done for r in results] == [False] * 4 + [True]
    assert results[3].metrics["searches"] == 4
    assert results[-1].metrics["stop/max_turns"] == 1
    last_observation = tokenizer.decode(results[3].next_observation)
    assert "No searches remain" not in last_observation and last_observation.rstrip().endswith(
        "</information>"
    )
    # Outside the preset the hint is still sent (today's default).
    default = make("search_r1", max_turns=1).make_env(0, tokenizer)
    (hinted,) = await play(default, [("<search> Serran Isles </search>", "stop")])
    assert tokenizer.decode(hinted.next_observation).endswith(LAST_TURN_HINT)


async def test_each_turn_is_capped_at_500_tokens(tokenizer):
    env = make("search_r1", preset="search_r1").make_env(0, tokenizer)
    await env.initial_observation()
    assert env.max_action_tokens() == 500 and env.max_response_tokens() is None
    assert make("search_r1").make_env(0, tokenizer).max_action_tokens() is None


# ---- every string from a file -----------------------------------------------------------


@pytest.mark.parametrize("suffix", [".yaml", ".json", ".toml"])
async def test_the_hints_and_prompts_come_from_a_strings_file(tokenizer, tmp_path, suffix):
    texts = {
        "invalid_action": "\nMY OWN INVALID HINT\n",
        "prompt_template": "MY PROMPT {question}\n",
        "system_prompt": "MY SYSTEM",
    }
    path = tmp_path / f"strings{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(texts))
    elif suffix == ".toml":
        path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in texts.items()))
    else:
        import yaml

        path.write_text(yaml.safe_dump(texts))
    cfg = make("search_r1", preset="search_r1", strings_file=str(path))
    env = cfg.make_env(0, tokenizer)
    ob, _ = await env.initial_observation()
    prompt = tokenizer.decode(ob)
    assert "MY PROMPT " in prompt and "MY SYSTEM" in prompt
    result = await env.step(encode(env, "no tags here", "eos"), extra={"stop_reason": "eos"})
    assert tokenizer.decode(result.next_observation).endswith("\nMY OWN INVALID HINT\n")
    # Inline strings win over the file; a field set by the caller wins over both.
    mine = make("search_r1", strings_file=str(path), strings={"invalid_action": "X"},
                system_prompt="S")  # fmt: skip
    assert mine.text("invalid_action") == "X" and mine.system_prompt == "S"


def test_an_unknown_string_name_is_a_config_error(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"invalid_actoin": "typo"}))
    with pytest.raises(
        EnvConfigError, match=r"unknown string name.*invalid_actoin.*invalid_action"
    ):
        make("search_r1", strings_file=str(path))
    path.write_text(json.dumps({"invalid_action": ["not", "text"]}))
    with pytest.raises(EnvConfigError, match="flat mapping of string name to text"):
        make("search_r1", strings_file=str(path))
    with pytest.raises(EnvConfigError, match="cannot read strings_file"):
        make("search_r1", strings_file=str(tmp_path / "missing.yaml"))


def test_the_tool_description_is_settable():
    cfg = make("search_r1", protocol="tool_call", strings={"tool_description": "MY TOOL"})
    (tool,) = cfg.make_text_env(0).tools()
    assert tool["function"]["description"] == "MY TOOL"
