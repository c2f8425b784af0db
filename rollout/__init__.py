"""agentenvs.rollout: running envs with a policy, and turning trajectories into training data.

One room per stage of the data path:

- ``collect/``: single, group and tree rollouts, the collector, the store and its records;
- ``data/``: trajectories to training samples, advantages, provenance, training data
  read back from a store;
- ``inspect/``: ``check``, the chat-template check, the viewer;
- ``policies/``: the samplers (vLLM/SGLang over HTTP, Hugging Face, scripted, replay);
- ``weights/``: which weights a policy samples with, and moving new ones into a server;
- ``trainers/``: one folder per trainer (``tinker``, ``pytrio``, ``trl``, ``verl``,
  ``jsonl``), each holding its hand-off and its loop integration;
- ``cli/``: the ``agentenvs`` command;
- ``tokenizer``: loading tokenizers, shared by every stage.

The names below are exported lazily (as httpx-style faces do): ``import agentenvs.rollout``
loads no stage, and ``from agentenvs.rollout import TrajectoryStore`` loads only the store.
A hand-off loads its trainer's dependency (numpy, torch) only when it is asked for.

A run is described once by a :class:`RunSpec` (env, dataset, policy, sampling, limits,
executor, store) and run by :func:`run` (``from agentenvs.rollout import RunSpec, run``),
what ``agentenvs rollout`` does.

``collect()`` is not among them: ``agentenvs.rollout.collect`` is the collect room (a
subpackage), and Python binds a subpackage to its parent's attribute once it is
imported, so a function of the same name here would be replaced by the package. Import
it from its home, ``agentenvs.rollout.collect.collector``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentenvs.rollout.collect.options import CollectOptions
    from agentenvs.rollout.collect.records import GroupRecord
    from agentenvs.rollout.collect.rollouts import do_group_rollout, do_single_rollout
    from agentenvs.rollout.collect.run import RunOutcome, run
    from agentenvs.rollout.collect.spec import (
        DatasetSpec,
        EnvSpec,
        ExecutorSpec,
        PolicySpec,
        RunSpec,
        StoreSpec,
    )
    from agentenvs.rollout.collect.store import TrajectoryStore
    from agentenvs.rollout.collect.streaming import StreamingCollection
    from agentenvs.rollout.collect.tree import BranchSchedule, as_trees, do_tree_rollout
    from agentenvs.rollout.data.advantages import compute_advantages, remove_constant_reward_groups
    from agentenvs.rollout.data.provenance import SamplingSettings
    from agentenvs.rollout.data.samples import TrainingSample, trajectories_to_samples
    from agentenvs.rollout.data.training_data import samples_from_records
    from agentenvs.rollout.policies import make_policy
    from agentenvs.rollout.tokenizer import load_tokenizer, train_chatml_tokenizer
    from agentenvs.rollout.trainers.jsonl.handoff import read_samples_jsonl, write_samples_jsonl
    from agentenvs.rollout.trainers.pytrio.handoff import to_pytrio_datums
    from agentenvs.rollout.trainers.tinker.handoff import assemble_tinker_data, to_tinker_datums
    from agentenvs.rollout.trainers.verl.handoff import from_verl_batch, to_verl_batch
    from agentenvs.rollout.weights.probe import Probe
    from agentenvs.rollout.weights.sync import WeightSync

_EXPORTS: dict[str, str] = {
    "CollectOptions": "agentenvs.rollout.collect.options",
    "DatasetSpec": "agentenvs.rollout.collect.spec",
    "EnvSpec": "agentenvs.rollout.collect.spec",
    "ExecutorSpec": "agentenvs.rollout.collect.spec",
    "PolicySpec": "agentenvs.rollout.collect.spec",
    "RunOutcome": "agentenvs.rollout.collect.run",
    "RunSpec": "agentenvs.rollout.collect.spec",
    "SamplingSettings": "agentenvs.rollout.data.provenance",
    "StoreSpec": "agentenvs.rollout.collect.spec",
    "run": "agentenvs.rollout.collect.run",
    "GroupRecord": "agentenvs.rollout.collect.records",
    "do_group_rollout": "agentenvs.rollout.collect.rollouts",
    "do_single_rollout": "agentenvs.rollout.collect.rollouts",
    "TrajectoryStore": "agentenvs.rollout.collect.store",
    "StreamingCollection": "agentenvs.rollout.collect.streaming",
    "BranchSchedule": "agentenvs.rollout.collect.tree",
    "as_trees": "agentenvs.rollout.collect.tree",
    "do_tree_rollout": "agentenvs.rollout.collect.tree",
    "compute_advantages": "agentenvs.rollout.data.advantages",
    "remove_constant_reward_groups": "agentenvs.rollout.data.advantages",
    "TrainingSample": "agentenvs.rollout.data.samples",
    "trajectories_to_samples": "agentenvs.rollout.data.samples",
    "samples_from_records": "agentenvs.rollout.data.training_data",
    "make_policy": "agentenvs.rollout.policies",
    "load_tokenizer": "agentenvs.rollout.tokenizer",
    "train_chatml_tokenizer": "agentenvs.rollout.tokenizer",
    "write_samples_jsonl": "agentenvs.rollout.trainers.jsonl.handoff",
    "read_samples_jsonl": "agentenvs.rollout.trainers.jsonl.handoff",
    "to_pytrio_datums": "agentenvs.rollout.trainers.pytrio.handoff",
    "to_tinker_datums": "agentenvs.rollout.trainers.tinker.handoff",
    "assemble_tinker_data": "agentenvs.rollout.trainers.tinker.handoff",
    "to_verl_batch": "agentenvs.rollout.trainers.verl.handoff",
    "from_verl_batch": "agentenvs.rollout.trainers.verl.handoff",
    "Probe": "agentenvs.rollout.weights.probe",
    "WeightSync": "agentenvs.rollout.weights.sync",
}
"""Public name -> the module that defines it (imported on first access)."""

__all__ = [
    "BranchSchedule",
    "CollectOptions",
    "DatasetSpec",
    "EnvSpec",
    "ExecutorSpec",
    "GroupRecord",
    "PolicySpec",
    "Probe",
    "RunOutcome",
    "RunSpec",
    "SamplingSettings",
    "StoreSpec",
    "StreamingCollection",
    "TrainingSample",
    "TrajectoryStore",
    "WeightSync",
    "as_trees",
    "assemble_tinker_data",
    "compute_advantages",
    "do_group_rollout",
    "do_single_rollout",
    "do_tree_rollout",
    "from_verl_batch",
    "load_tokenizer",
    "make_policy",
    "read_samples_jsonl",
    "remove_constant_reward_groups",
    "run",
    "samples_from_records",
    "to_pytrio_datums",
    "to_tinker_datums",
    "to_verl_batch",
    "train_chatml_tokenizer",
    "trajectories_to_samples",
    "write_samples_jsonl",
]


def __getattr__(name: str) -> Any:
    """Import the module that defines ``name`` on first access, then cache the name here."""
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
