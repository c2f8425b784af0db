"""The presets agentenvs ships, one entry each: environment, trainer half, card facts.

The environment half of a preset lives with its environment (``presets`` on the
config class); this registry names it, points at its trainer half
(:mod:`~agentenvs.rollout.presets.originals`) and says what its reproduction card
needs: which config keys only say *where* data lives on this machine, which modules
hold its prompt strings and its reward, and the scripted oracle's reward band.
It imports no environment, so listing presets stays instant; a test checks it
against the environments' own ``presets``.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.rollout.presets.originals import GIGPO, SEARCH_R1, VERL_RETOOL, TrainerHalf


@dataclass(frozen=True)
class PresetEntry:
    name: str
    env: str
    summary: str
    half: TrainerHalf
    location_keys: tuple[str, ...]
    """Config keys that point at data on this machine (dotted for nested ones): a card
    takes them from the store it checks, and hashes the data they point at instead."""
    prompts_module: str
    reward_module: str
    oracle_band: tuple[float, float]
    """Per-trajectory total reward of the scripted ``oracle`` policy on any task (measured:
    docs/presets.md)."""


PRESETS: dict[str, PresetEntry] = {
    entry.name: entry
    for entry in (
        PresetEntry(
            name="search_r1",
            env="search_r1",
            summary="Search-R1 (PeterGriffinJin/Search-R1 a14dc3a): GRPO, G=5, 4 turns",
            half=SEARCH_R1,
            location_keys=("train_file", "test_file", "retriever.corpus", "retriever.index_dir"),
            prompts_module="agentenvs.envs.search_r1.prompts",
            reward_module="agentenvs.envs.search_r1.reward",
            oracle_band=(1.0, 1.0),
        ),
        PresetEntry(
            name="verl_retool",
            env="retool",
            summary="verl recipe/retool (volcengine/verl 9886706): GRPO, G=16, 16 turns",
            half=VERL_RETOOL,
            location_keys=("data_path", "eval_data_path"),
            prompts_module="agentenvs.envs.retool.prompts",
            reward_module="agentenvs.envs.retool.reward",
            oracle_band=(1.0, 1.0),
        ),
        PresetEntry(
            name="gigpo",
            env="alfworld",
            summary="GiGPO on ALFWorld (langfengQ/verl-agent d0b9724): G=8, 50 steps",
            half=GIGPO,
            location_keys=("data",),
            prompts_module="agentenvs.envs.alfworld.prompts",
            reward_module="agentenvs.envs.alfworld.env",
            oracle_band=(10.0, 10.0),
        ),
    )
}


class UnknownPresetError(AgentEnvsError, KeyError):
    """A preset name agentenvs does not ship; the message lists the ones it does."""

    def __str__(self) -> str:
        return str(self.args[0])


def preset(name: str) -> PresetEntry:
    if name not in PRESETS:
        raise UnknownPresetError(f"unknown preset {name!r}; presets: {', '.join(sorted(PRESETS))}")
    return PRESETS[name]


def presets_of(env: str) -> list[str]:
    return [entry.name for entry in PRESETS.values() if entry.env == env]
