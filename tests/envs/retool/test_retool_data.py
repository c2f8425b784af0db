"""ReTool's problem data: the shipped set and loaders for users' files."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from agentenvs.envs.data_files import DataError
from agentenvs.envs.registry import make
from agentenvs.envs.retool.problems import load_problems


def test_shipped_set_is_large_varied_and_complete():
    problems = load_problems()
    assert len(problems) >= 50
    assert len({p.id for p in problems}) == len(problems)
    topics = Counter(p.topic for p in problems)
    for topic in (
        "big_integers",
        "modular_arithmetic",
        "combinatorics",
        "sums",
        "primes",
        "linear_systems",
    ):
        assert topics[topic] >= 4, topic
    for p in problems:
        assert p.question.strip() and p.answer.strip()
        assert p.solution and p.check and p.solution != p.check


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_prompt_answer_jsonl(tmp_path):
    path = _write_jsonl(
        tmp_path / "mine.jsonl",
        [
            {"prompt": "What is 6*7?", "answer": 42},
            {"question": "Half of 1?", "ground_truth": "\\frac{1}{2}"},
            {
                "prompt": [{"role": "system", "content": "x"}, {"role": "user", "content": "2+2?"}],
                "answer": "4",
            },
        ],
    )
    problems = load_problems(path)
    assert [(p.question, p.answer) for p in problems] == [
        ("What is 6*7?", "42"),
        ("Half of 1?", "\\frac{1}{2}"),
        ("2+2?", "4"),
    ]
    assert all(p.solution is None for p in problems)


VERL_ROWS = [
    {
        "data_source": "math_dapo",
        "prompt": [{"role": "user", "content": "Compute 2^10."}],
        "ability": "MATH",
        "reward_model": {"style": "rule", "ground_truth": "1024"},
        "extra_info": {"index": "a-1"},
    },
    {
        "data_source": "math_dapo",
        "prompt": [{"role": "user", "content": "Compute 3^4."}],
        "ability": "MATH",
        "reward_model": {"style": "rule", "ground_truth": "81"},
        "extra_info": {"index": "a-2"},
    },
]


def test_verl_jsonl(tmp_path):
    problems = load_problems(_write_jsonl(tmp_path / "verl.jsonl", VERL_ROWS))
    assert [(p.id, p.question, p.answer, p.topic) for p in problems] == [
        ("a-1", "Compute 2^10.", "1024", "math_dapo"),
        ("a-2", "Compute 3^4.", "81", "math_dapo"),
    ]


def test_verl_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(VERL_ROWS), path)
    problems = load_problems(path)
    assert [(p.question, p.answer) for p in problems] == [
        ("Compute 2^10.", "1024"),
        ("Compute 3^4.", "81"),
    ]
    config = make("retool", data_path=str(path))
    assert config.num_tasks() == 2 and config.task_id(1) == "train/a-2"


def test_eval_split_and_max_problems(tmp_path):
    train = _write_jsonl(tmp_path / "t.jsonl", [{"prompt": f"q{i}", "answer": i} for i in range(5)])
    test = _write_jsonl(tmp_path / "e.jsonl", [{"prompt": "e", "answer": 1}])
    config = make("retool", data_path=str(train), eval_data_path=str(test), max_problems=3)
    assert config.num_tasks("train") == 3
    assert config.num_tasks("test") == 1


def test_bad_files_are_clear_errors(tmp_path):
    with pytest.raises(DataError, match="cannot read"):
        load_problems(tmp_path / "missing.jsonl")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "a", "answer": 1}\nnot json\n')
    with pytest.raises(DataError, match="line 2"):
        load_problems(broken)
    no_answer = _write_jsonl(tmp_path / "na.jsonl", [{"prompt": "a"}])
    with pytest.raises(DataError, match="no answer"):
        load_problems(no_answer)
    no_truth = _write_jsonl(tmp_path / "nt.jsonl", [{"prompt": [], "reward_model": {}}])
    with pytest.raises(DataError, match="ground_truth"):
        load_problems(no_truth)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match="no problems"):
        load_problems(empty)
    bad_parquet = tmp_path / "bad.parquet"
    bad_parquet.write_bytes(b"not parquet")
    with pytest.raises(DataError, match="parquet"):
        load_problems(bad_parquet)


def test_edited_file_is_reloaded(tmp_path):
    path = _write_jsonl(tmp_path / "x.jsonl", [{"prompt": "a", "answer": 1}])
    assert len(load_problems(path)) == 1
    _write_jsonl(path, [{"prompt": "a", "answer": 1}, {"prompt": "b", "answer": 2}])
    assert len(load_problems(path)) == 2
