"""Splits are declared on the config and checked in one place (issue #30).

A plugin that ignores ``split`` used to run its train tasks for ``--split tset`` and
exit 0. ``EnvConfig.splits`` names the accepted splits; ``EnvConfig.check_split`` is
the one check every way of making tasks goes through (datasets, group builders, the
gymnasium adapter).
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from agentenvs.envs import make
from agentenvs.envs.config import EnvConfig, UnknownSplitError
from agentenvs.envs.guess_number import GuessNumberEnv
from agentenvs.envs.gym_adapter import TextGymEnv
from agentenvs.rollout.tokenizer import load_tokenizer


class IgnoresSplit(EnvConfig):
    """Answers the same for every split name, as a careless plugin does."""

    env_name: ClassVar[str] = "ignores_split"

    def num_tasks(self, split: str = "train") -> int:
        return 2

    def make_text_env(self, task_index: int, split: str = "train"):
        return GuessNumberEnv(5, 1, 10)


def test_an_undeclared_split_is_refused_by_datasets_and_builders() -> None:
    config = IgnoresSplit()
    tokenizer = load_tokenizer("builtin")
    with pytest.raises(UnknownSplitError, match=r"unknown split 'tset' for ignores_split; its "
                                                r"splits: train, test"):  # fmt: skip
        config.dataset(tokenizer, group_size=1, split="tset")
    with pytest.raises(UnknownSplitError):
        config.group_builder(0, 1, tokenizer, split="tset")
    assert len(config.dataset(tokenizer, group_size=1, split="test")) == 2
    assert issubclass(UnknownSplitError, ValueError)  # `except ValueError` still catches it


def test_an_environment_declares_its_own_splits() -> None:
    class Three(IgnoresSplit):
        splits: ClassVar[tuple[str, ...]] = ("train", "dev", "holdout")

    Three.check_split("holdout")
    with pytest.raises(UnknownSplitError, match="its splits: train, dev, holdout"):
        Three.check_split("test")


@pytest.mark.parametrize(
    ("env", "accepted"),
    [
        ("guess_number", ["train", "test"]),
        ("search_r1", ["train", "test", "validation", "dev", "eval"]),
        ("retool", ["train", "test", "eval", "validation", "val"]),
        ("alfworld", ["train", "valid_seen", "valid_unseen", "eval_out_of_distribution"]),
    ],
)
def test_flagships_declare_the_splits_and_aliases_they_read(env, accepted) -> None:
    cls = type(make(env))
    for split in accepted:
        cls.check_split(split)
    with pytest.raises(UnknownSplitError):
        cls.check_split("tset")


def test_the_gymnasium_adapter_refuses_an_undeclared_split() -> None:
    with pytest.raises(UnknownSplitError, match="guess_number"):
        TextGymEnv("guess_number", split="tset")


def test_a_gym_text_space_prints_short() -> None:
    """``print(env.observation_space)`` used to print a million-character charset."""
    env = TextGymEnv("guess_number")
    try:
        shown = repr(env.observation_space)
        assert len(shown) < 100 and "1000000" in shown
        assert len(str(env.action_space)) < 100
        assert env.observation_space.contains("any text, é 中 ✓")
    finally:
        env.close()


def test_a_bad_nested_key_lists_the_fields_of_its_level() -> None:
    with pytest.raises(ValueError, match="Accepted keys under limits: ") as caught:
        make("guess_number", limits={"bogus": 1})
    listed = str(caught.value).split("Accepted keys under limits: ")[1].split(", ")
    assert "max_turns" in listed and "limits" not in listed and "high" not in listed
