"""Each preset's trainer half: the data, and the settings it emits checked against the
real trainers installed here (verl 0.9.1's config, trl's GRPOConfig, the Tinker
cookbook's Config and our cookbook dataset builder)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from agentenvs.envs.registry import config_class
from agentenvs.rollout.data.gigpo import GigpoSettings
from agentenvs.rollout.presets import PRESETS, presets_of
from agentenvs.rollout.presets.emit import (
    cookbook_fields,
    emit,
    trl_kwargs,
    verl_command_line,
    verl_overrides,
)
from agentenvs.rollout.presets.originals import GIGPO, KNOBS, TRAINER_HALVES

NAMES = sorted(PRESETS)


@pytest.mark.parametrize("env", ["search_r1", "retool", "alfworld"])
def test_registry_names_exactly_the_environments_own_presets(env):
    assert presets_of(env) == sorted(config_class(env).presets)


@pytest.mark.parametrize("name", NAMES)
def test_every_knob_is_known_and_cited(name):
    half = PRESETS[name].half
    assert TRAINER_HALVES[name] is half
    names = [k.name for k in half.knobs]
    assert len(names) == len(set(names))
    for knob in half.knobs:
        assert knob.name in KNOBS, knob.name
        assert re.fullmatch(r"[\w./-]+\.(sh|yaml|py)(:\d+| \(.+\))", knob.source), knob.source


def _verl_config():
    import verl
    from omegaconf import OmegaConf

    path = Path(verl.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    config = OmegaConf.load(path)
    OmegaConf.set_struct(config, True)  # an unknown key raises, as Hydra's overrides do
    return config


@pytest.mark.parametrize("name", NAMES)
def test_verl_overrides_are_fields_of_verl_0_9_1(name):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import AdvantageEstimator

    config = _verl_config()
    emitted = verl_overrides(PRESETS[name].half)
    assert emitted.settings
    for key, value in emitted.settings.items():
        default = OmegaConf.select(config, key, default=KeyError)
        assert default is not KeyError, f"{key} is not a verl 0.9.1 field"
        if isinstance(default, bool):
            assert isinstance(value, bool), (key, value)
        elif isinstance(default, (int, float)):
            assert isinstance(value, (int, float)) and not isinstance(value, bool), (key, value)
    merged = OmegaConf.merge(config, OmegaConf.from_dotlist(verl_command_line(emitted)))
    for key, value in emitted.settings.items():
        assert OmegaConf.select(merged, key) == value
    estimators = {e.value for e in AdvantageEstimator}
    if PRESETS[name].half.value("estimator") in estimators:
        assert emitted.settings["algorithm.adv_estimator"] in estimators
    else:  # gigpo: verl 0.9.1 has none, and the emitter says so instead of writing it
        assert "algorithm.adv_estimator" not in emitted.settings
        assert "not in verl 0.9.1" in emitted.left_out["estimator"]


def test_a_misspelt_verl_key_would_be_caught():
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError

    with pytest.raises(ConfigKeyError):
        OmegaConf.merge(_verl_config(), OmegaConf.from_dotlist(["actor_rollout_ref.actor.lr=1"]))


@pytest.mark.parametrize("name", NAMES)
def test_trl_kwargs_make_a_grpo_config(name, tmp_path):
    from trl import GRPOConfig

    half = PRESETS[name].half
    emitted = trl_kwargs(half)
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert set(emitted.settings) <= fields
    per_step = half.value("mini_batch_size") * half.value("group_size")
    config = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=per_step,
        use_cpu=True,
        report_to=[],
        **emitted.settings,
    )
    assert config.num_generations == half.value("group_size")
    assert config.learning_rate == half.value("learning_rate")
    assert config.beta == half.value("kl_loss_coef")
    assert config.epsilon_high == half.value("clip_high")
    assert config.scale_rewards == "group"  # all three divide by the group's std


def test_cookbook_fields_are_the_cookbooks():
    import chz
    import tinker_cookbook.rl.train as train
    from tinker.types.loss_fn_type import LossFnType

    from agentenvs.rollout.trainers.tinker.cookbook import AgentenvsDatasetBuilder

    top = set(chz.chz_fields(train.Config))
    builder = set(chz.chz_fields(AgentenvsDatasetBuilder))
    datum_keys = set(
        re.findall(r'"(\w+)"', Path(__import__("tinker").types.datum.__file__).read_text())
    )
    for name in NAMES:
        emitted = cookbook_fields(PRESETS[name].half)
        for key in emitted.settings:
            head, _, rest = key.partition(".")
            assert (rest in builder) if head == "dataset_builder" else key in top, key
        assert emitted.settings["loss_fn"] in LossFnType.__args__
        assert set(emitted.settings["loss_fn_config"]) <= datum_keys


SILENT = {
    # (target, knob, value): the trainer already behaves so; nothing to set, nothing lost.
    ("trl", "estimator", "grpo"),  # TRL's trainer is GRPO
    ("trl", "kl_loss_type", "low_var_kl"),  # TRL's KL term is k3, verl's low_var_kl
    ("trl", "kl_reward_coef", 0.0),
    ("trl", "entropy_coeff", 0.0),
    ("trl", "gamma", 1.0),
    ("cookbook", "gamma", 1.0),
    ("cookbook", "kl_loss_coef", 0.0),
}


@pytest.mark.parametrize("target", ["verl", "trl", "cookbook"])
@pytest.mark.parametrize("name", NAMES)
def test_what_a_trainer_cannot_take_is_said_not_dropped(name, target):
    """Every knob either changes what is emitted (remove it and the output differs) or
    is listed with the reason it is left out, or matches the trainer's fixed behaviour."""
    half = PRESETS[name].half
    emitted = emit(half, target)
    for knob in half.knobs:
        if knob.name in emitted.left_out or (target, knob.name, knob.value) in SILENT:
            continue
        rest = dataclasses.replace(half, knobs=tuple(k for k in half.knobs if k is not knob))
        assert emit(rest, target).settings != emitted.settings, (name, target, knob.name)


def test_gigpo_defaults_are_the_trainer_half():
    settings = GigpoSettings()
    assert settings.gamma == GIGPO.value("gamma")
    assert settings.step_advantage_w == GIGPO.value("step_advantage_w")
    assert settings.normalize_std == GIGPO.value("normalize_std")
