"""Math problems for ReTool: the shipped set and loaders for users' files.

Three layouts are read, one record per line (JSONL) or per row (parquet):

* ``problems``: the shipped set (``envs/retool/data/problems.jsonl``): ``id``,
  ``topic``, ``question``, ``answer``, plus ``solution`` (the oracle program that
  prints the answer) and ``check`` (an independent program that prints it too).
* ``prompt_answer``: ``prompt`` (a string, or chat messages) and ``answer``;
  ``question``/``problem`` and ``ground_truth`` are accepted as synonyms.
* ``verl``: verl's RL layout, ``prompt`` as chat messages and
  ``reward_model.ground_truth`` (DAPO-Math-17k and the ReTool recipe use it).

Chat-message prompts contribute their last user message as the question: the
environment wraps it in its own protocol prompt.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from agentenvs.envs.data_files import DataError, json_lines

DataFormat = Literal["auto", "problems", "prompt_answer", "verl"]

SHIPPED_PROBLEMS = Path(__file__).parent / "data" / "problems.jsonl"


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str
    id: str = ""
    topic: str = ""
    solution: str | None = None
    """A program that prints the answer; the scripted oracle writes it."""
    check: str | None = None
    """An independent program printing the same answer (shipped set only)."""


def load_problems(
    path: str | os.PathLike[str] | None = None, fmt: DataFormat = "auto"
) -> list[Problem]:
    """Problems from ``path`` (the shipped set when None), cached per file version."""
    resolved = Path(path) if path is not None else SHIPPED_PROBLEMS
    try:
        stat = resolved.stat()
    except OSError as err:
        raise DataError(f"cannot read problems from {resolved}: {err.strerror or err}") from None
    return list(_load_cached(str(resolved.resolve()), stat.st_mtime_ns, stat.st_size, fmt))


@lru_cache(maxsize=16)
def _load_cached(path: str, mtime_ns: int, size: int, fmt: DataFormat) -> tuple[Problem, ...]:
    rows = _read_parquet(path) if path.endswith(".parquet") else _read_jsonl(path)
    problems = []
    for where, row in rows:
        try:
            problems.append(problem_from_record(row, fmt, default_id=f"{Path(path).stem}-{where}"))
        except DataError as err:
            raise DataError(f"{path}, record {where}: {err}") from None
    if not problems:
        raise DataError(f"{path} holds no problems")
    return tuple(problems)


def _read_jsonl(path: str) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, row in json_lines(handle, lambda n: f"{path}, line {n}"):
            if not isinstance(row, dict):
                raise DataError(f"{path}, line {number}: expected a JSON object")
            rows.append((number, row))
    return rows


def _read_parquet(path: str) -> list[tuple[int, dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq  # lazy: only parquet users need pyarrow
    except ImportError as err:  # pragma: no cover - pyarrow ships with the search extra
        raise DataError(
            f"reading {path} needs pyarrow: pip install 'agentenvs[search]' or pyarrow"
        ) from err
    try:
        table = pq.read_table(path)
    except Exception as err:
        raise DataError(f"{path} is not a readable parquet file: {err}") from None
    return list(enumerate(table.to_pylist(), 1))


def detect_format(row: dict[str, Any]) -> DataFormat:
    if isinstance(row.get("reward_model"), dict):
        return "verl"
    if "solution" in row and "question" in row and "answer" in row and "id" in row:
        return "problems"
    return "prompt_answer"


def problem_from_record(
    row: dict[str, Any], fmt: DataFormat = "auto", default_id: str = ""
) -> Problem:
    fmt = detect_format(row) if fmt == "auto" else fmt
    if fmt == "verl":
        reward_model = row.get("reward_model")
        if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
            raise DataError("verl layout needs reward_model.ground_truth")
        answer = reward_model["ground_truth"]
        question = _question_text(row.get("prompt"))
        extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
        pid = str(extra.get("index", row.get("id", default_id)))
        topic = str(row.get("data_source", ""))
        return Problem(question, _answer_text(answer), pid, topic)
    question = _question_text(_first(row, "question", "prompt", "problem"))
    answer = _first(row, "answer", "ground_truth")
    if answer is None:
        raise DataError("no answer field (answer or ground_truth)")
    return Problem(
        question,
        _answer_text(answer),
        str(row.get("id", default_id)),
        str(row.get("topic", "")),
        row.get("solution") if fmt == "problems" else None,
        row.get("check") if fmt == "problems" else None,
    )


def _first(row: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if row.get(key) is not None:
            return row[key]
    return None


def _question_text(prompt: Any) -> str:
    if isinstance(prompt, str) and prompt.strip():
        return prompt
    if isinstance(prompt, list | tuple):
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users and isinstance(users[-1].get("content"), str):
            return users[-1]["content"]
    raise DataError("no question: expected a non-empty string or chat messages with a user turn")


def _answer_text(answer: Any) -> str:
    if isinstance(answer, list | tuple) and answer:
        answer = answer[0]
    if isinstance(answer, bool) or answer is None:
        raise DataError(f"unusable answer {answer!r}")
    text = str(answer).strip()
    if not text:
        raise DataError("empty answer")
    return text
