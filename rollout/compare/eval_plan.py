"""What ``agentenvs eval`` runs: a fixed test panel and budget, deterministic where it can be.

An evaluation differs from a training rollout in what it must hold still. The
panel is the first ``tasks`` tasks of the split in order (all of them by default),
never wrapped around; the budget is the env config's limits (a named preset's when
one is given); sampling is greedy (temperature 0, seed 0) for the policies that
sample, unless the user asks otherwise. All of it is written into every record's
provenance under ``eval`` (with a hash of a local model's weights), so ``compare``
can later show two evaluations were the same test and say which weights each
evaluated. The run itself is ``agentenvs rollout``'s
(:func:`~agentenvs.rollout.cli.rollout_run.run_rollout`), so it resumes the same way.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenvs.rollout.cli.common import CLIError

SAMPLING_POLICIES = ("hf", "openai")
"""Policies with a temperature and a seed: eval makes them greedy unless told otherwise."""
DETERMINISTIC_POLICIES = ("scripted", "replay")


@dataclass
class EvalPlan:
    env: str
    split: str
    tasks: int
    group_size: int
    overrides: dict[str, Any]
    policy_options: dict[str, Any]
    provenance: dict[str, Any] = field(default_factory=dict)
    """The ``eval`` section every record carries."""

    @property
    def deterministic(self) -> bool:
        return bool(self.provenance["eval"]["deterministic"])


def plan_eval(
    env: str,
    *,
    policy: str,
    split: str,
    preset: str | None,
    tasks: int | None,
    group_size: int,
    overrides: dict[str, Any],
    policy_options: dict[str, Any],
) -> EvalPlan:
    """The panel, budget and sampling an evaluation of ``env`` runs with (see the module)."""
    from agentenvs.envs.registry import make

    overrides = dict(overrides)
    if preset is not None:
        if overrides.get("preset") not in (None, preset):
            raise CLIError(f"--preset {preset} and --set preset={overrides['preset']} disagree")
        overrides["preset"] = preset
    if group_size < 1:
        raise CLIError(f"--group-size must be at least 1, got {group_size}")
    config = make(env, **overrides)
    try:
        config.check_split(split)
        total = config.num_tasks(split)
    except ValueError as error:
        raise CLIError(f"--split: {error}") from None
    count = total if tasks is None else tasks
    if count < 1:
        raise CLIError(f"--tasks must be at least 1, got {count}")
    if count > total:
        raise CLIError(
            f"--tasks {count}: the {split} split of {env} has {total} tasks (an evaluation "
            "panel does not repeat tasks)"
        )
    options = dict(policy_options)
    if policy in SAMPLING_POLICIES:
        options.setdefault("temperature", 0.0)
        options.setdefault("seed", 0)
    greedy = policy in DETERMINISTIC_POLICIES or (
        policy in SAMPLING_POLICIES and float(options["temperature"]) == 0.0
    )
    panel = [config.task_id(i, split) for i in range(count)]
    section = {
        "split": split,
        "tasks": count,
        "of_split": total,
        "panel_sha256": hashlib.sha256(json.dumps(panel).encode()).hexdigest()[:16],
        "group_size": group_size,
        "preset": overrides.get("preset"),
        "budget": config.limits.model_dump(mode="json"),
        "deterministic": greedy,
    }
    weights = local_weights(policy, options)
    if weights is not None:
        section["weights"] = weights
    return EvalPlan(env, split, count, group_size, overrides, options, {"eval": section})


def local_weights(policy: str, options: dict[str, Any]) -> dict[str, Any] | None:
    """A local model directory's name and content hash (what ``compare`` tells weights by)."""
    model = options.get("model")
    if policy != "hf" or not isinstance(model, str) or not Path(model).is_dir():
        return None
    from agentenvs.envs.weights_identity import hash_weights

    directory = Path(model).resolve()
    return {"name": model, "sha256": hash_weights(directory), "path": "full"}
