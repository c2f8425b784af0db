"""Each preset's trainer half, validated by the trainers themselves.

The emitted settings go through each trainer's own machinery: verl 0.9.1's override list
is composed with hydra against the config files shipped in the installed ``verl`` package
and checked by ``verl.utils.config.validate_config``; TRL's by building a real
``GRPOConfig`` (its ``__post_init__`` derives the generation batch); the cookbook's by a
real ``tinker_cookbook.rl.train.Config`` whose batch the cookbook's own ``split_list``
cuts into optimiser steps. From what each trainer made of the settings, rows per
optimiser step and optimiser steps per batch must equal the original's, read from its
source (the ``ORIGINAL`` table cites file:line); where a trainer cannot express them the
emitter must say so with both figures, and the test proves it cannot.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import re
from pathlib import Path

import pytest

from agentenvs.envs import make
from agentenvs.envs.registry import config_class
from agentenvs.rollout.data.gigpo import GigpoSettings
from agentenvs.rollout.presets import PRESETS, presets_of
from agentenvs.rollout.presets.batches import BATCH_KNOBS, BatchFigures, original_figures
from agentenvs.rollout.presets.emit import (
    cookbook_fields,
    emit,
    trl_kwargs,
    verl_command_line,
    verl_overrides,
)
from agentenvs.rollout.presets.originals import GIGPO, KNOBS, TRAINER_HALVES

NAMES = sorted(PRESETS)

ORIGINAL = {
    # PeterGriffinJin/Search-R1 a14dc3a, scripts/nq_hotpotqa/v0.2/train_grpo.sh:31
    # train_batch_size=512, :59 n_agent=5 (verl/trainer/ppo/ray_trainer.py:702 repeats the
    # batch), :45 ppo_mini_batch_size=256 with rollout.n=1 (verl/trainer/config/
    # ppo_trainer.yaml:90; verl/workers/fsdp_workers.py:100 multiplies by it): 256 of 2,560
    # trajectory rows per step, 10 steps.
    "search_r1": BatchFigures("trajectory", 2560, 256, 10),
    # volcengine/verl 9886706, recipe/retool/run_qwen2_7b_dapo.sh:41 train_batch_size=64,
    # :43 n_resp_per_prompt=16, :42 ppo_mini_batch_size=16 prompts (verl/workers/
    # fsdp_workers.py:235 multiplies by rollout.n): 256 of 1,024 rows per step, 4 steps.
    "verl_retool": BatchFigures("trajectory", 1024, 256, 4),
    # langfengQ/verl-agent d0b9724, examples/gigpo_trainer/run_alfworld.sh:32
    # ppo_mini_batch_size=256 with rollout.n=1 (verl/trainer/config/ppo_trainer.yaml:133;
    # verl/workers/fsdp_workers.py:150); one row per step taken
    # (agent_system/multi_turn_rollout/rollout_loop.py:269), so the batch's rows and its
    # step count (verl/workers/actor/dp_actor.py:338 splits by 256) follow the episodes.
    "gigpo": BatchFigures("step", None, 256, None),
}
RESPONSE = {  # whole-row response budget, and the first prompt's
    # Search-R1 train_grpo.sh:33 (cuts the response: search_r1/llm_agent/generation.py:165)
    # and :35 (max_start_length: generation.py:223)
    "search_r1": (4096, 2048),
    # run_qwen2_7b_dapo.sh:38 and :37
    "verl_retool": (16384, 2048),
    # run_alfworld.sh:25 (a row is one step) and :24
    "gigpo": (512, 2048),
}
DECLARED = {
    # 256 rows of 5-trajectory groups is 51.2 prompts, and no whole divisor of 512 prompts
    # gives 10 steps: verl 0.9.1 counts prompts (verl/trainer/ppo/ray_trainer.py:1353).
    ("search_r1", "verl"),
    # verl's agent loop and TRL's rollout_func take one row per episode, verl-agent one
    # per step; the cookbook's step count is fixed before the episodes run.
    ("gigpo", "verl"),
    ("gigpo", "trl"),
    ("gigpo", "cookbook"),
}


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


@pytest.mark.parametrize("name", NAMES)
def test_the_originals_batch_is_read_from_its_source(name):
    assert original_figures(PRESETS[name].half) == ORIGINAL[name]


# ---- verl 0.9.1 ----------------------------------------------------------------------------


def _compose_verl(overrides: list[str]):
    """verl's own ``ppo_trainer`` config (the yaml files of the installed package, with
    their defaults lists) composed by hydra with ``overrides``, as ``main_ppo`` does."""
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose("ppo_trainer", overrides=overrides)


def verl_figures(config) -> BatchFigures:
    """verl 0.9.1's batch: ``train_batch_size x rollout.n`` rows, ``ppo_mini_batch_size x
    rollout.n`` per optimiser step (verl/trainer/ppo/ray_trainer.py:1352-1353), the
    worker's iterator over that many rows per pass (verl/workers/engine_workers.py:287)."""
    actor, n = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout.n
    rows, per_step = config.data.train_batch_size * n, actor.ppo_mini_batch_size * n
    return BatchFigures("trajectory", rows, per_step, math.ceil(rows / per_step) * actor.ppo_epochs)


@pytest.mark.parametrize("name", NAMES)
def test_verl_runs_its_own_validation_on_the_emitted_command(name):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import AdvantageEstimator
    from verl.utils.config import validate_config

    emitted = verl_overrides(PRESETS[name].half)
    config = _compose_verl(verl_command_line(emitted))
    validate_config(config, use_reference_policy=True, use_critic=False)  # raises if refused
    for key, value in emitted.settings.items():
        assert OmegaConf.select(config, key) == value, key
    assert config.algorithm.adv_estimator in {e.value for e in AdvantageEstimator}
    assert config.algorithm.adv_estimator != "gae"  # gae would train a critic
    response, prompt = RESPONSE[name]
    assert config.actor_rollout_ref.rollout.response_length == response
    assert config.data.max_prompt_length == prompt
    figures = verl_figures(config)
    assert figures == emitted.batch.figures
    if (name, "verl") not in DECLARED:
        assert figures == ORIGINAL[name] and not emitted.batch.differs


def test_the_batch_verl_refused_before_is_still_refused():
    """The old gigpo emission (ppo_mini_batch_size=256 prompts of 8) is what verl refuses:
    the validation above can fail."""
    from verl.utils.config import validate_config

    emitted = verl_overrides(GIGPO)
    old = [a for a in verl_command_line(emitted) if "ppo_mini_batch_size=" not in a]
    config = _compose_verl([*old, "actor_rollout_ref.actor.ppo_mini_batch_size=256"])
    with pytest.raises(ValueError, match=r"train_batch_size \(16\) must be >= .*\(256\)"):
        validate_config(config, use_reference_policy=True, use_critic=False)


def test_search_r1s_rows_cannot_be_whole_prompts_in_verl():
    half = PRESETS["search_r1"].half
    prompts, group = half.value("prompts_per_step"), half.value("group_size")
    assert 256 % group != 0  # 51.2 prompts of 5
    assert not any(prompts % d == 0 and prompts // d == 10 for d in range(1, prompts + 1))
    differs = verl_overrides(half).batch.differs
    assert "51.2 prompts" in differs and "320 rows per step, 8 steps" in differs
    assert "256 trajectory rows per optimiser step, 10 optimiser steps" in differs


def test_a_misspelt_verl_key_is_refused():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        _compose_verl(["actor_rollout_ref.actor.lr=1"])


# ---- TRL -----------------------------------------------------------------------------------


def trl_figures(config) -> BatchFigures:
    """TRL's batch: one generation of ``generation_batch_size`` completions, trained in
    ``steps_per_generation`` micro-steps of ``per_device x processes``, an optimiser step
    every ``gradient_accumulation_steps`` of them, ``num_iterations`` times."""
    per_step = config.per_device_train_batch_size * config.world_size
    per_step *= config.gradient_accumulation_steps
    steps = config.steps_per_generation // config.gradient_accumulation_steps
    return BatchFigures(
        "trajectory", config.generation_batch_size, per_step, steps * config.num_iterations
    )


@pytest.mark.parametrize("name", NAMES)
def test_trl_builds_a_grpo_config_with_the_originals_batch(name, tmp_path):
    from trl import GRPOConfig

    half = PRESETS[name].half
    emitted = trl_kwargs(half)
    assert set(emitted.settings) <= {f.name for f in dataclasses.fields(GRPOConfig)}
    ((_, per_step),) = emitted.batch.requires.items()
    for accumulation in (1, 4):  # any split of the product gives the same batch
        config = GRPOConfig(
            output_dir=str(tmp_path),
            per_device_train_batch_size=per_step // accumulation,
            gradient_accumulation_steps=accumulation,
            use_cpu=True,
            report_to=[],
            **emitted.settings,
        )
        figures = trl_figures(config)
        assert figures == emitted.batch.figures
        if (name, "trl") not in DECLARED:
            assert figures == ORIGINAL[name] and not emitted.batch.differs
    assert config.num_generations == half.value("group_size")
    assert config.max_completion_length == RESPONSE[name][0]
    assert config.learning_rate == half.value("learning_rate")
    assert config.beta == half.value("kl_loss_coef")
    assert config.epsilon_high == half.value("clip_high")
    assert config.scale_rewards == "group"  # all three divide by the group's std
    if half.value("val_n"):
        assert config.num_generations_eval == half.value("val_n")


# ---- the Tinker cookbook -------------------------------------------------------------------


def cookbook_figures(config, rows: int | None) -> BatchFigures:
    """The cookbook's batch: ``batch_size`` groups of ``group_size`` datums, split by its
    own ``split_list`` into ``num_substeps`` optimiser steps (tinker_cookbook/rl/train.py:330)."""
    from tinker_cookbook.utils.misc_utils import split_list

    builder = config.dataset_builder
    if rows is None:  # one datum per step taken: only the share per step is fixed
        return BatchFigures("step", None, None, config.num_substeps)
    assert rows == builder.batch_size * builder.group_size
    parts = split_list(list(range(rows)), min(config.num_substeps, rows))
    sizes = {len(part) for part in parts}
    per_step = sizes.pop() if len(sizes) == 1 else None
    return BatchFigures("trajectory", rows, per_step, len(parts))


@pytest.mark.parametrize("name", NAMES)
def test_the_cookbook_builds_its_config_with_the_originals_batch(name, tmp_path):
    import chz
    import tinker_cookbook.rl.train as train
    from tinker.types.loss_fn_type import LossFnType

    from agentenvs.rollout.trainers.tinker.cookbook import AgentenvsDatasetBuilder

    half = PRESETS[name].half
    emitted = cookbook_fields(half)
    top = {k: v for k, v in emitted.settings.items() if not k.startswith("dataset_builder.")}
    builder_fields = {k.partition(".")[2]: v for k, v in emitted.settings.items() if k not in top}
    assert set(top) <= set(chz.chz_fields(train.Config))
    assert top["loss_fn"] in LossFnType.__args__
    builder = AgentenvsDatasetBuilder(model_name_for_tokenizer="builtin", **builder_fields)
    config = train.Config(
        dataset_builder=builder, model_name="m", recipe_name="r", log_path=str(tmp_path), **top
    )
    figures = cookbook_figures(config, emitted.batch.figures.rows_per_batch)
    assert figures == emitted.batch.figures
    if (name, "cookbook") not in DECLARED:
        assert figures == ORIGINAL[name] and not emitted.batch.differs
    env = make(builder.env, **builder.env_config)  # the environment keeps the budgets
    response, prompt = RESPONSE[name]
    assert env.limits.max_prompt_tokens == prompt
    if half.value("row_unit") == "trajectory":
        assert env.limits.max_response_tokens == response
    else:  # a row is one step: the per-turn cap is the row's budget
        assert env.limits.max_tokens_per_turn == response
    assert config.max_tokens <= response
    train_set, _ = asyncio.run(builder())  # the builder takes what was emitted
    assert train_set.get_batch(0)


# ---- nothing dropped -----------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_every_batch_figure_that_differs_names_both(name):
    for target in ("verl", "trl", "cookbook"):
        batch = emit(PRESETS[name].half, target).batch
        assert bool(batch.differs) == ((name, target) in DECLARED), (name, target)
        if batch.differs:
            assert f"{ORIGINAL[name].rows_per_optimiser_step} " in batch.differs
            assert batch.figures != ORIGINAL[name]
        if name == "gigpo" and target != "cookbook":
            assert "one row per episode" in batch.differs and "one row per step" in batch.differs


SILENT = {
    # (target, knob, value): the trainer already behaves so; nothing to set, nothing lost.
    ("trl", "estimator", "grpo"),  # TRL's trainer is GRPO
    ("trl", "kl_loss_type", "low_var_kl"),  # TRL's KL term is k3, verl's low_var_kl
    ("trl", "kl_reward_coef", 0.0),
    ("trl", "entropy_coeff", 0.0),
    ("trl", "gamma", 1.0),
    ("cookbook", "gamma", 1.0),
    ("cookbook", "kl_loss_coef", 0.0),
    ("cookbook", "max_prompt_tokens", 2048),  # dataset_builder.env_config's limits
}


@pytest.mark.parametrize("target", ["verl", "trl", "cookbook"])
@pytest.mark.parametrize("name", NAMES)
def test_what_a_trainer_cannot_take_is_said_not_dropped(name, target):
    """Every knob either changes what is emitted (remove it and the output differs) or
    is listed with the reason it is left out, or matches the trainer's fixed behaviour;
    the batch knobs are the batch figures' (tests above)."""
    half = PRESETS[name].half
    emitted = emit(half, target)
    for knob in half.knobs:
        if knob.name in BATCH_KNOBS or knob.name in emitted.left_out:
            continue
        if (target, knob.name, knob.value) in SILENT:
            continue
        rest = dataclasses.replace(half, knobs=tuple(k for k in half.knobs if k is not knob))
        assert emit(rest, target).settings != emitted.settings, (name, target, knob.name)


def test_gigpo_defaults_are_the_trainer_half():
    settings = GigpoSettings()
    assert settings.gamma == GIGPO.value("gamma")
    assert settings.step_advantage_w == GIGPO.value("step_advantage_w")
    assert settings.normalize_std == GIGPO.value("normalize_std")


@pytest.mark.parametrize("name", NAMES)
def test_the_docs_show_what_preset_show_emits_today(name):
    """docs/presets.md holds each preset's sheet (preset show NAME --markdown) as it is now."""
    from agentenvs.rollout.presets.sheet import preset_sheet

    page = (Path(__file__).parents[3] / "docs" / "presets.md").read_text()
    found = re.search(rf"<!-- preset-sheet: {name} -->\n(.*?)<!-- /preset-sheet -->", page, re.S)
    assert found, f"docs/presets.md has no sheet for {name}"
    assert found.group(1) == preset_sheet(PRESETS[name].half)
