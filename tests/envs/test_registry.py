"""The registry: discovery through entry points, validated configs, clear errors."""

from __future__ import annotations

import logging
import pickle
from importlib.metadata import EntryPoint

import pytest

import agentenvs.envs as envs
from agentenvs.envs import catalogue, registry
from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.references import Registry


def test_guess_number_is_listed_with_its_gym_id() -> None:
    infos = {info.name: info for info in envs.list_envs()}
    info = infos["guess_number"]
    assert info.gym_id == "agentenvs/GuessNumber-v0"
    assert info.target == "agentenvs.envs.guess_number:GuessNumberConfig"
    assert info.description.startswith("Guess a hidden integer")


def test_make_validates_and_nests_config() -> None:
    config = envs.make("guess_number", low=1, high=10, limits={"max_turns": 3})
    assert isinstance(config, GuessNumberConfig)
    assert (config.low, config.high) == (1, 10)
    assert config.limits.max_turns == 3
    assert config.renderer_kind == "chat"
    assert all(1 <= config.secret(i) <= 10 for i in range(20))


def test_config_hash_follows_the_config() -> None:
    a = envs.make("guess_number", high=10)
    assert a.config_hash() == envs.make("guess_number", high=10).config_hash()
    assert a.config_hash() != envs.make("guess_number", high=11).config_hash()


@pytest.mark.parametrize(
    ("config", "must_name"),
    [
        ({"nope": 1}, "nope"),
        ({"limits": {"max_turn": 3}}, "limits.max_turn"),
        ({"tasks": 0}, "tasks"),
        ({"renderer": "html"}, "renderer"),
    ],
)
def test_bad_config_names_the_key_and_lists_accepted_ones(config, must_name) -> None:
    with pytest.raises(envs.EnvConfigError) as caught:
        envs.make("guess_number", **config)
    message = str(caught.value)
    assert "guess_number" in message
    assert must_name in message
    if "." in must_name:  # the keys of the level that was wrong
        assert "Accepted keys under limits: " in message and "max_turns" in message
    else:
        assert "Accepted keys:" in message and "limits" in message
    assert "\n" not in message  # one line, fit for a CLI error


def test_unknown_name_lists_the_registered_ones() -> None:
    with pytest.raises(envs.UnknownEnvError) as caught:
        envs.make("no_such_env")
    message = str(caught.value)
    assert message.startswith("unknown environment 'no_such_env'")
    assert "guess_number" in message
    assert isinstance(caught.value, KeyError)  # callers may catch it as a lookup failure


def _with_extra_points(monkeypatch, *points: EntryPoint) -> None:
    """The registry as if an installed package declared ``points`` too."""
    table = {**registry.ENVIRONMENTS.references(), **{p.name: p.value for p in points}}
    widened = Registry("environment", table, unknown=registry.UnknownEnvError)
    monkeypatch.setattr(registry, "ENVIRONMENTS", widened)
    monkeypatch.setattr(catalogue, "ENVIRONMENTS", widened)  # where it is defined


def test_entry_point_that_is_not_a_config_is_refused(monkeypatch) -> None:
    _with_extra_points(
        monkeypatch, EntryPoint("not_a_config", "collections:OrderedDict", "agentenvs.envs")
    )
    with pytest.raises(TypeError, match="EnvConfig subclass"):
        envs.config_class("not_a_config")


def test_a_broken_plugin_does_not_hide_the_others(monkeypatch, caplog) -> None:
    _with_extra_points(
        monkeypatch, EntryPoint("broken", "agentenvs_missing_module:Config", "agentenvs.envs")
    )
    with caplog.at_level(logging.WARNING, logger="agentenvs.envs.registry"):
        names = [info.name for info in envs.list_envs()]
    assert "guess_number" in names and "broken" not in names
    assert any("broken" in rec.getMessage() for rec in caplog.records)


def test_dataset_wraps_tasks_and_builders_pickle(tokenizer) -> None:
    config = envs.make("guess_number", tasks=3)
    dataset = config.dataset(tokenizer, group_size=2, batch_size=2, n_groups=5)
    assert len(dataset) == 3
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    assert [b.task_index for b in builders] == [0, 1, 2, 0, 1]
    assert [b.task_id for b in builders] == ["train/0", "train/1", "train/2", "train/0", "train/1"]
    with pytest.raises(IndexError):
        dataset.get_batch(3)
    clone = pickle.loads(pickle.dumps(builders[1]))
    assert clone.task_id == "train/1" and clone.group_size == 2 and clone.envs == []


async def test_builder_makes_group_size_envs_and_cleans_up(tokenizer) -> None:
    builder = envs.make("guess_number").group_builder(4, 3, tokenizer)
    made = await builder.make_envs()
    assert len(made) == 3 and all(isinstance(e, envs.RenderedEnv) for e in made)
    # the same task in every env of the group: the GRPO grouping
    first = [await e.initial_observation() for e in made]
    assert all(ob == first[0] for ob in first)
    secrets = {e.task.secret for e in made}  # type: ignore[attr-defined]
    assert len(secrets) == 1
    # pickling a builder with live envs drops them (they do not travel)
    assert pickle.loads(pickle.dumps(builder)).envs == []
    await builder.cleanup()
    await builder.cleanup()  # idempotent
    assert all(e.closed for e in made)


def test_empty_split_is_an_error(tokenizer) -> None:
    class NoTasks(GuessNumberConfig):
        def num_tasks(self, split: str = "train") -> int:
            return 0

    with pytest.raises(ValueError, match="no tasks"):
        NoTasks().dataset(tokenizer, group_size=1)
