"""The runs the corruption suite spoils, and every hand-off form written from them.

Small runs are collected on the real Qwen2.5, Qwen3 and DeepSeek-V3 tokenizers
(``support/vocab``): guess-number under the chat renderer and under the continuation
renderer (mixed rewards: every odd trajectory opens with a malformed turn; made-up
negative logprobs so shifts are visible), the same chat run with no logprobs at all
(the scripted policy has none: the store holds None, the hand-off 0.0 with
``has_logprobs`` false), ALFWorld in window mode (trajectories cut into several
training samples), Search-R1 and ReTool (tool environments, on the real retriever and
sandbox). From each store every hand-off form is written the way a trainer's side
writes it (:func:`write_forms`): the JSONL samples, a verl batch file, Tinker and
PyTRIO datum files; a writer bug (:class:`Writers`) replaces one step.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.registry import config_class
from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.collector import CollectOptions, ProvenanceNotes, collect
from agentenvs.rollout.collect.rollouts import current_slot
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.data.training_data import samples_from_records
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.policies.base import current_turn
from agentenvs.rollout.trainers.jsonl.datums import DatumLine, read_datums_jsonl, write_datums_jsonl
from agentenvs.rollout.trainers.jsonl.handoff import write_samples_jsonl
from agentenvs.rollout.trainers.pytrio.handoff import save_pytrio_datums
from agentenvs.rollout.trainers.tinker.handoff import save_tinker_datums
from agentenvs.rollout.trainers.verl.handoff import save_verl_batch, to_verl_batch

Lines = list[dict[str, Any]]

TARGET_GROUP = 1
"""Position (in the store) of the group a slot-chosen bug strikes."""
TARGET_TRAJ = 1
"""The trajectory it strikes: one that opens with a malformed turn (:class:`MixedPolicy`)."""


def collect_config(
    tokenizer: Any, config: EnvConfig, path: Path, policy: Any, *, groups: int = 3, size: int = 3
) -> Path:
    """``groups`` groups of ``config`` (a real or a buggy one) into a store at ``path``."""
    dataset = config.dataset(tokenizer, group_size=size, n_groups=groups)
    builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
    policy.weights_version = 3  # a VersionedPolicy: every record names the version it sampled
    result = asyncio.run(
        collect(
            builders, policy, CollectOptions(concurrency=2, retries=0, progress=False),
            store=TrajectoryStore(path), notes=ProvenanceNotes(policy_name="test"),
        )
    )  # fmt: skip
    if result.failed:
        raise AssertionError(f"groups failed: {[r.error for r in result.failed]}")
    return path


def target_slot(key: str | None) -> bool:
    """Whether a group key is the target group's (keys are ``<position>:<task id>``)."""
    return key is not None and key.split(":", 1)[0] == str(TARGET_GROUP)


Bug = Callable[[TokensWithLogprobs, str | None, int, int], TokensWithLogprobs]
"""(the policy's answer, group key, trajectory, turn) -> what the buggy client returns."""


class BuggyClient:
    """A per-env policy factory whose answers pass through ``bug`` (a client between
    the sampler and the loop)."""

    per_env = True

    def __init__(self, inner: Any, bug: Bug) -> None:
        self.inner = inner
        self.bug = bug

    def __call__(self, env: Any) -> Any:
        policy = self.inner(env)
        slot = current_slot.get()
        traj = slot.traj_index if slot is not None else 0

        async def client(observation, stop, *, max_tokens=None):
            out = await policy(observation, stop, max_tokens=max_tokens)
            turn = current_turn.get()
            return self.bug(out, turn.group_key if turn else None, traj, turn.turn if turn else 0)

        return client


class MixedPolicy:
    """The scripted oracle with made-up negative logprobs (none with ``logprobs=False``,
    as the scripted policy itself); every odd trajectory of a group opens with the
    env's malformed variant (a penalty), so rewards differ within a group."""

    per_env = True

    def __init__(self, seed: int = 0, mixed: bool = True, logprobs: bool = True) -> None:
        self.oracle = make_policy("scripted")
        self.malformed = make_policy("scripted", variant="malformed")
        self.rng = random.Random(seed)
        self.mixed = mixed
        self.logprobs = logprobs

    def __call__(self, env: Any) -> Any:
        oracle = self.oracle(env)
        slot = current_slot.get()
        odd = slot is not None and slot.traj_index % 2 == 1
        first = self.malformed(env) if self.mixed and odd else oracle
        turns = [0]

        async def policy(observation, stop, *, max_tokens=None):
            inner = first if turns[0] == 0 else oracle
            turns[0] += 1
            out = await inner(observation, stop, max_tokens=max_tokens)
            if not self.logprobs:
                assert out.logprobs is None  # the scripted policy claims none
                return out
            logprobs = [-self.rng.uniform(0.01, 3.0) for _ in out.tokens]
            return TokensWithLogprobs(out.tokens, logprobs, out.stop_reason)

        return policy


@dataclass(frozen=True)
class Run:
    env: str
    overrides: dict[str, Any] = field(default_factory=dict)
    mixed: bool = True
    logprobs: bool = True
    groups: int = 3
    size: int = 3


RUNS: dict[str, Run] = {
    "chat": Run("guess_number", {"tasks": 3}),
    "continuation": Run("guess_number", {"tasks": 3, "renderer": "continuation"}),
    "window": Run("alfworld", {"history": "window", "limits": {"max_turns": 6}}, mixed=False),
    "nologprobs": Run("guess_number", {"tasks": 3}, logprobs=False),
    "search_r1": Run("search_r1", {}, groups=2, size=2),
    "retool": Run("retool", {}, mixed=False, groups=2, size=2),
}
"""The runs every corruption is made from, by name."""


def collect_run(
    tokenizer: Any,
    run: str,
    path: Path,
    *,
    config: type | None = None,
    bug: Callable[..., Any] | None = None,
) -> Path:
    """Run ``run``'s groups into a store: with ``config`` (a buggy subclass of the env's
    config, made with the run's overrides) and a client ``bug`` when given."""
    spec = RUNS[run]
    made = (config or config_class(spec.env))(**spec.overrides)
    policy: Any = MixedPolicy(mixed=spec.mixed, logprobs=spec.logprobs)
    if bug is not None:
        policy = BuggyClient(policy, bug)
    return collect_config(tokenizer, made, path, policy, groups=spec.groups, size=spec.size)


def write_handoff(store: Path, path: Path, keep: Callable[[Any], bool] | None = None) -> Path:
    """The hand-off a trainer writes from the store: the stored advantages, the estimator
    (``keep``: a writer that drops the samples it refuses)."""
    samples, metadata = _samples(store)
    write_samples_jsonl(
        [s for s in samples if keep is None or keep(s)], path,
        extra={"advantage_estimator": metadata[0]["advantage_estimator"]},
    )  # fmt: skip
    return path


def _samples(store: Path) -> tuple[list[Any], list[dict[str, Any]]]:
    return samples_from_records(list(TrajectoryStore(store).read()))


FORMS = ("store", "handoff", "handoff+store", "verl", "verl+store", "tinker", "tinker+store",
         "pytrio", "pytrio+store")  # fmt: skip
"""Where a run is checked: the store, and each hand-off alone and with its store."""
HANDOFF_FORMS = ("handoff", "verl", "tinker", "pytrio")
PROMPT_PADDING = 4
"""Columns of left padding every verl row gets at least (verl pads to a fixed width)."""


@dataclass(frozen=True)
class Writers:
    """How each hand-off is written from the store: a writer bug replaces one step."""

    keep: Callable[[Any], bool] | None = None
    """Which samples a hand-off writer keeps (all of them by default)."""
    verl: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """A change to the padded batch (a padder bug)."""
    datums: Callable[[DatumLine], DatumLine] | None = None
    """A change to each datum a builder makes (a shift bug)."""


def write_forms(store: Path, folder: Path, tokenizer: Any, writers: Writers = Writers()) -> dict[str, Path]:  # fmt: skip
    """Every hand-off form of ``store``, written into ``folder`` (see :data:`FORMS`)."""
    samples, metadata = _samples(store)
    kept = [s for s in samples if writers.keep is None or writers.keep(s)]
    extra = {"advantage_estimator": metadata[0]["advantage_estimator"]}
    paths = {
        "store": store,
        "handoff": write_handoff(store, folder / "samples.jsonl", writers.keep),
    }
    width = max(s.prompt_length for s in kept) + PROMPT_PADDING
    batch = to_verl_batch(kept, tokenizer.pad_token_id, prompt_length=width)
    if writers.verl is not None:
        batch = writers.verl(batch)
    paths["verl"] = save_verl_batch(batch, folder / "batch.safetensors", samples=kept, extra=extra)
    for name, save in (("tinker", save_tinker_datums), ("pytrio", save_pytrio_datums)):
        path = folder / f"{name}.jsonl"
        save(kept, path, extra=extra)
        if writers.datums is not None:
            write_datums_jsonl([writers.datums(d) for d in read_datums_jsonl(path)], path)
        paths[name] = path
    return paths


def form_files(paths: dict[str, Path], form: str) -> tuple[Path, Path | None]:
    """(the file checked, the store it is checked with) of one form."""
    name, _, with_store = form.partition("+")
    return paths[name], paths["store"] if with_store else None


def read_lines(path: Path) -> Lines:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_lines(lines: Lines, path: Path) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def sample_of(lines: Lines, g: int, t: int, turn: int) -> int:
    """Which training sample of its trajectory a stored turn falls in."""
    transitions = lines[g]["trajectories"][t]["transitions"][: turn + 1]
    return sum(1 for tr in transitions if tr["ob_prefix"] == 0) - 1
