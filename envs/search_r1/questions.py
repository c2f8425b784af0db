"""Question sets: the shipped Serran Isles questions and user files.

A user file is JSONL, JSON (a list) or parquet with one question per row:

* FlashRAG/Search-R1 raw layout: ``question`` and ``golden_answers`` (a list or one
  string; ``answers``/``answer`` are read too);
* Search-R1's training parquet (``scripts/data_process/nq_search.py``): golden answers
  in ``reward_model.ground_truth.target``, the templated prompt in ``prompt`` (a list of
  chat messages). When ``question`` is missing, that prompt is used verbatim.

Shipped questions also carry ``hops`` (query and expected evidence per search), which
the scripted oracle uses; user rows without them get a one-search oracle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentenvs.envs.data_files import DataError, json_lines
from agentenvs.envs.search_r1.corpus import data_path

SHIPPED_SPLITS = {"train": "questions_train.jsonl", "test": "questions_test.jsonl"}
SPLIT_ALIASES = {"validation": "test", "val": "test", "dev": "test", "eval": "test"}


@dataclass(frozen=True)
class Hop:
    query: str
    evidence: str | None = None


@dataclass(frozen=True)
class QATask:
    id: str
    question: str
    golden_answers: tuple[str, ...]
    hops: tuple[Hop, ...] = ()
    prompt: str | None = None
    """A prompt already rendered by the data (Search-R1 parquet); used verbatim."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def _plain(value: Any) -> Any:
    """A numpy array (what pandas gives for a parquet list column) as a list."""
    import numpy as np

    return value.tolist() if isinstance(value, np.ndarray) else value


def _as_answers(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    value = _plain(value)
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [str(value)]


def _golden(row: dict[str, Any]) -> list[str] | None:
    for key in ("golden_answers", "answers", "answer"):
        answers = _as_answers(row.get(key))
        if answers:
            return answers
    truth = (row.get("reward_model") or {}).get("ground_truth")
    if isinstance(truth, dict):
        return _as_answers(truth.get("target"))
    return _as_answers(truth)


def _prompt_text(prompt: Any) -> str | None:
    if isinstance(prompt, str):
        return prompt
    prompt = _plain(prompt)
    if isinstance(prompt, list):
        users = [
            m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"
        ]
        if users and isinstance(users[-1], str):
            return users[-1]
    return None


def task_from_row(row: dict[str, Any], index: int, source: str = "<rows>") -> QATask:
    golden = _golden(row)
    if not golden:
        raise DataError(
            f"{source} row {index}: no golden answers (expected golden_answers, answers, "
            "answer, or reward_model.ground_truth.target)"
        )
    question = row.get("question")
    prompt = None
    if not isinstance(question, str) or not question.strip():
        prompt = _prompt_text(row.get("prompt"))
        if prompt is None:
            raise DataError(f"{source} row {index}: no 'question' and no user 'prompt'")
        question = prompt
    hops = tuple(
        Hop(str(h["query"]), h.get("evidence")) for h in (row.get("hops") or []) if "query" in h
    )
    extra_info = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    task_id = row.get("id", extra_info.get("index", index))
    extra = {k: row[k] for k in ("data_source", "kind") if k in row}
    return QATask(str(task_id), question.strip(), tuple(golden), hops, prompt, extra)


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DataError(f"question file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as err:
            raise DataError("reading parquet needs pyarrow: pip install pyarrow") from err
        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if suffix == ".json":
        data = json.loads(text)
        if isinstance(data, dict):  # {"data": [...]} wrappers
            data = next((v for v in data.values() if isinstance(v, list)), None)
        if not isinstance(data, list):
            raise DataError(f"{path}: expected a JSON list of questions")
        return data
    return [row for _, row in json_lines(text.splitlines(), lambda n: f"{path}:{n}")]


@lru_cache(maxsize=16)
def _load(path: str, mtime_ns: int) -> tuple[QATask, ...]:
    rows = read_rows(Path(path))
    return tuple(task_from_row(row, i, path) for i, row in enumerate(rows))


def load_tasks(path: str | Path) -> list[QATask]:
    """Questions of a user file (cached per file version)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise DataError(f"question file not found: {file}")
    return list(_load(str(file), file.stat().st_mtime_ns))


def shipped_path(split: str) -> Path:
    split = SPLIT_ALIASES.get(split, split)
    if split not in SHIPPED_SPLITS:
        raise DataError(f"unknown split {split!r}; the shipped data has train and test")
    return data_path(SHIPPED_SPLITS[split])


def shipped_tasks(split: str = "train") -> list[QATask]:
    return load_tasks(shipped_path(split))
