"""Presets that reproduce a published setup: the trainer half and the reproduction card.

Each preset has two halves. The environment half is the ``preset`` of an environment's
config (``make("alfworld", preset="gigpo")``, in ``envs/*/config.py``). The trainer
half (:mod:`.originals`) is the original's training settings as data, with sources,
emitted for verl, TRL and the Tinker cookbook (:mod:`.emit`). A card (:mod:`.card`)
hashes what a run must hold fixed and catches a store that drifted from it.

``agentenvs preset list | show NAME | card NAME`` and ``agentenvs check --card NAME``.
"""

from agentenvs.rollout.presets.registry import (
    PRESETS,
    PresetEntry,
    UnknownPresetError,
    preset,
    presets_of,
)

__all__ = ["PRESETS", "PresetEntry", "UnknownPresetError", "preset", "presets_of"]
