"""compare over the grpo example's own weights (examples/grpo_torch.py), evaluated by
``agentenvs eval`` on one seeded test panel.

The example is run as it runs by default (its tiny model, 40 warm-up steps on the
oracle, 6 GRPO steps); its first weights (the model it builds) and its last are saved
beside it. Sampling is at temperature 1 with a fixed seed, one episode at a time
(group size 1, concurrency 1), so the generator is drawn from in one order and every
run here is reproducible: the intervals below are what these stores give, every time.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from support.compare_runs import GUESS_SMALL, compare, evaluate
from support.paths import EXAMPLES

PANEL = ["--tasks", "64", "--group-size", "1", "--concurrency", "1"]


@pytest.fixture(scope="module")
def weights(tmp_path_factory, tokenizer) -> dict[str, Path]:
    spec = importlib.util.spec_from_file_location(
        "grpo_compare_example", EXAMPLES / "grpo_torch.py"
    )
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example
    spec.loader.exec_module(example)
    root = tmp_path_factory.mktemp("grpo")
    model = example.build_tiny_model(tokenizer, seed=0)
    saved = {}
    for name in ("first", "last"):
        if name == "last":
            history = example.train(env_config=example.DEMO_GUESS_CONFIG, model=model,
                                    tokenizer=tokenizer, steps=6, groups=2, group_size=6,
                                    warmup_steps=40)  # fmt: skip
            assert [h.weights_version for h in history] == list(range(6))
        saved[name] = root / name
        model.save_pretrained(saved[name])
        tokenizer.save_pretrained(saved[name])
    return saved


def sampled(out: Path, model: Path, seed: int) -> Path:
    evaluate(out, "--policy", "hf", "--policy-opt", f"model={model}", "--policy-opt",
             "temperature=1", "--policy-opt", f"seed={seed}", *PANEL, *GUESS_SMALL)  # fmt: skip
    return out


def test_the_trained_weights_beat_the_first_on_the_same_seeded_panel(weights, tmp_path) -> None:
    first = sampled(tmp_path / "first.jsonl", weights["first"], seed=0)
    last = sampled(tmp_path / "last.jsonl", weights["last"], seed=0)
    code, report, _ = compare(first, last)
    assert code == 1 and report["comparability"]["refused"] == ["weights"]  # the point
    code, report, _ = compare(first, last, "--allow", "weights")
    assert code == 0
    pair = report["paired"][0]
    low, _high = pair["reward"]["ci"]
    assert low > 0, pair["reward"]  # a real improvement: the interval excludes zero
    assert "higher" in pair["reward"]["verdict"] and pair["wins"] > pair["losses"]
    first_stats, last_stats = (r["statistics"] for r in report["runs"])
    assert last_stats["success_rate"] > first_stats["success_rate"]
    (a,), (b,) = (r["weights"] for r in report["runs"])
    assert a["sha256"] != b["sha256"] and None not in (a["sha256"], b["sha256"])


def test_two_samples_of_the_same_weights_agree_within_their_interval(weights, tmp_path) -> None:
    one = sampled(tmp_path / "seed1.jsonl", weights["last"], seed=1)
    two = sampled(tmp_path / "seed2.jsonl", weights["last"], seed=2)
    code, report, _ = compare(one, two)
    assert code == 0 and report["comparability"]["differences"] == []
    assert any("sampling seeds differ" in n for n in report["comparability"]["notes"])
    pair = report["paired"][0]
    low, high = pair["reward"]["ci"]
    assert low < 0 < high, pair["reward"]  # equal within the interval, and not trivially
    assert pair["wins"] and pair["losses"]  # the two samples really differ task by task
    assert all(r["statistics"]["reward_std"] > 0 for r in report["runs"])
