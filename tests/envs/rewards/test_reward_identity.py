"""Reward identities: the code hash follows code, not comments; every env names its rewards."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from agentenvs.envs import catalogue, make, registry
from agentenvs.envs.config import EnvConfig
from agentenvs.envs.references import Registry
from agentenvs.envs.rewards.identity import (
    RewardIdentity,
    identity_of,
    recorded_components,
    reward_components,
    with_reward_provenance,
)

SOURCE = """
from agentenvs.envs.rewards.identity import reward_function

@reward_function("correct", "{version}")
def score(answer, truth):
    {doc}
    return float(answer == truth){tail}
"""


def _load(tmp_path: Path, name: str, *, version="1", doc='"""Right or not."""', tail="") -> object:
    path = tmp_path / f"{name}.py"
    path.write_text(SOURCE.format(version=version, doc=doc, tail=tail))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.score


def test_the_hash_ignores_docstrings_comments_and_versions_but_not_code(tmp_path):
    base = identity_of(_load(tmp_path, "r_base"))
    redocumented = identity_of(_load(tmp_path, "r_doc", doc='"""Other words."""', tail="  # note"))
    bumped = identity_of(_load(tmp_path, "r_bump", version="2"))
    edited = identity_of(_load(tmp_path, "r_edit", tail=" * 2"))
    assert redocumented.code_sha256 == base.code_sha256 == bumped.code_sha256
    assert edited.code_sha256 != base.code_sha256  # the edit nobody declared shows
    assert base.differences(bumped) == [
        f"function: {base.function} -> {bumped.function}",
        "version: 1 -> 2",
    ]
    assert (base.name, base.version) == ("correct", "1")


def test_an_undecorated_function_is_refused_with_the_fix():
    with pytest.raises(TypeError, match="@reward_function"):
        identity_of(len)


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ("guess_number", ["guess"]),
        ("retool", ["correct", "shaped_reward", "final_step"]),
        ("search_r1", ["score", "final_step"]),
    ],
)
def test_every_builtin_env_names_its_reward_components(env, names):
    config = make(env).model_dump(mode="json")
    components = reward_components(env, config)
    assert [c.name for c in components] == names
    assert all(c.function and c.version and len(c.code_sha256) == 16 for c in components)


def test_alfworld_names_the_step_that_scores_actions():
    (component,) = reward_components("alfworld", {})
    assert component.function.endswith("ALFWorldTextEnv._step")


def test_retool_with_a_judge_names_the_judge_with_its_prompt_hash():
    config = make("retool", judge={"base_url": "http://127.0.0.1:9", "model": "j"})
    judge = reward_components("retool", config.model_dump(mode="json"))[-1]
    assert judge.name == "judge" and judge.settings["model"] == "j"
    assert len(judge.settings["prompt_sha256"]) == 16
    assert "judge" not in make("retool").model_dump(mode="json")  # no judge: config as before


def test_provenance_round_trips_and_a_caller_set_value_wins():
    provenance = with_reward_provenance({"policy": {}}, "guess_number", {})
    (component,) = recorded_components(provenance)
    assert isinstance(component, RewardIdentity) and component.name == "guess"
    kept = with_reward_provenance({"reward": {"components": []}}, "guess_number", {})
    assert recorded_components(kept) == []
    assert with_reward_provenance({}, "unknown_env", {}) == {}


class _OwnConfig(EnvConfig):
    """A registered environment of one's own: it declares its reward components."""

    env_name: ClassVar[str] = "my_env"
    bonus: float = 0.0

    def reward_components(self) -> list[RewardIdentity]:
        return [RewardIdentity("mine", "pkg:fn", "3", "0" * 16, settings={"bonus": self.bonus})]


def test_an_env_of_ones_own_declares_its_components_on_its_config(monkeypatch):
    own = Registry("environment", {"my_env": f"{__name__}:_OwnConfig"})
    monkeypatch.setattr(registry, "ENVIRONMENTS", own)
    monkeypatch.setattr(catalogue, "ENVIRONMENTS", own)  # where it is defined
    (found,) = reward_components("my_env", {"bonus": 0.5})
    assert (found.name, found.settings) == ("mine", {"bonus": 0.5})  # from the config given
    provenance = with_reward_provenance({}, "my_env", {"bonus": 0.5})
    assert recorded_components(provenance) == [found]
    assert reward_components("my_env", {"no_such_key": 1}) == []  # a config it refuses
    assert EnvConfig().reward_components() == []  # the contract's default: none declared
