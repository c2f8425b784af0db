"""What defines a run, so a resume can tell its own store from another run's.

Resume skips the groups a store already holds, matched by key. Keys alone say
nothing about *how* a group was made: rerunning with another config, policy,
tokenizer or group size into the same file used to skip everything and report
success. A :class:`RunIdentity` names the settings that make two runs the same
experiment; every record stores it, and the collector refuses to resume into a
store whose latest run differs, saying what differs and how to start afresh.

Deliberately left out: weights versions and sampling seeds (a training loop
changes them every step and still writes one run), server URLs and timeouts
(moving a server does not change the experiment).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.tokenizer_fingerprint import tokenizer_key, tokenizer_key_from
from agentenvs.envs.types import GroupDescription
from agentenvs.rollout.collect.records import GroupRecord

_POLICY_FIELDS = ("policy", "model", "variant", "source", "temperature", "top_p", "max_tokens")
"""The parts of a policy's self-description that change what it samples."""


@dataclass(frozen=True)
class RunIdentity:
    """The settings that make two collections the same run."""

    env: str = ""
    config_sha256: str | None = None
    split: str | None = None
    tokenizer: str | None = None
    """Vocabulary hash, plus the chat template's hash when there is one."""
    policy: str | None = None
    """A canonical JSON of the policy's defining fields (kind, model, sampling)."""
    group_size: int | None = None

    @functools.cached_property
    def fingerprint(self) -> str:
        """A short hash of every field (computed once: resume compares it per record)."""
        payload = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "fingerprint": self.fingerprint}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunIdentity:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def differences(self, other: RunIdentity) -> list[str]:
        """``"group_size: 4 in the store, 2 now"`` for each field that differs. A field
        this side cannot tell (``None``: no tokenizer handed in, say) is not a difference."""
        found = []
        for item in fields(self):
            stored, current = getattr(other, item.name), getattr(self, item.name)
            if current is not None and stored != current:
                found.append(f"{item.name}: {_show(stored)} in the store, {_show(current)} now")
        return found


def _show(value: Any) -> str:
    return "unknown" if value is None else str(value)


def config_sha256(config: dict[str, Any]) -> str:
    """The hash :meth:`EnvConfig.config_hash` gives, computed from the dumped config."""
    payload = json.dumps(config, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def policy_key(described: dict[str, Any]) -> str:
    """The defining fields of a policy's self-description, as one canonical string."""
    kept = {k: described[k] for k in _POLICY_FIELDS if described.get(k) is not None}
    return json.dumps(kept, sort_keys=True, default=str)


def identity_for_collection(
    first: GroupDescription, *, described_policy: dict[str, Any]
) -> RunIdentity:
    """The identity of a collection about to start, from its first group's description
    and the policy's self-description."""
    config = dict(first.config)
    return RunIdentity(
        env=first.env_name,
        config_sha256=config_sha256(config) if config else None,
        split=first.split if isinstance(first.split, str) else None,
        tokenizer=tokenizer_key(first.tokenizer),
        policy=policy_key(described_policy),
        group_size=first.group_size if isinstance(first.group_size, int) else None,
    )


def identity_of_record(record: GroupRecord) -> tuple[RunIdentity, bool]:
    """The identity a stored record carries, and whether it was stored (``True``)
    or pieced together from an older record's env config, provenance and group size
    (``False``: fields an older record cannot tell are left unknown)."""
    if record.run:
        return RunIdentity.from_json(record.run), True
    tokenizer = tokenizer_key_from(record.provenance.get("tokenizer"))
    size = len(record.group.trajectories) if record.group is not None else None
    derived = RunIdentity(
        env=record.env,
        config_sha256=config_sha256(record.env_config) if record.env_config else None,
        tokenizer=tokenizer,
        group_size=size,
    )
    return derived, False


@dataclass(frozen=True, slots=True)
class ResumeFacts:
    """What a resume reads of one stored record: its key, outcome and run, no trajectories.

    Deciding what to skip needs only these, so a store can keep them for every line
    in memory (its resume index) instead of parsing every trajectory on every call."""

    key: str
    status: str
    run_fingerprint: str
    """The fingerprint as stored (``""`` for none): latest outcomes are kept per run and key."""
    identity: RunIdentity
    explicit: bool
    """Whether ``identity`` was stored (see :func:`identity_of_record`)."""

    @classmethod
    def of(cls, record: GroupRecord) -> ResumeFacts:
        identity, explicit = identity_of_record(record)
        fingerprint = str(record.run.get("fingerprint", ""))
        return cls(record.key, record.status, fingerprint, identity, explicit)

    def group_slot(self) -> tuple[str, str]:
        """The group this record is an outcome of (as ``store.record_slot`` names it)."""
        return self.run_fingerprint, self.key


def _matches(facts: ResumeFacts, current: RunIdentity) -> bool:
    if facts.explicit and facts.identity.fingerprint == current.fingerprint:
        return True
    return not _known_differences(facts.identity, current)


def _known_differences(stored: RunIdentity, current: RunIdentity) -> list[str]:
    """Differences in the fields the stored side knows (all of them when it was stored)."""
    found = current.differences(stored)
    return [d for d in found if not d.split(": ", 1)[1].startswith("unknown in the store")]


class RunMismatchError(AgentEnvsError, ValueError):
    """Resuming into a store made by a different run; the message says what differs."""


def _config_detail(difference: str, path: Path, config: Mapping[str, Any]) -> str:
    """A ``config_sha256`` difference said as the config keys that differ and their values
    (the store's from its last record); other differences as they are."""
    if not difference.startswith("config_sha256:"):
        return difference
    from agentenvs.rollout.collect.store import read_records

    try:
        stored = read_records(path)[-1].env_config
    except (OSError, ValueError, IndexError):
        return difference
    changed = config_differences(stored, dict(config))
    if not changed:
        return difference
    return "config " + ", ".join(changed)


def config_differences(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``"limits.max_turns: 10 in the store, 8 now"`` for each (nested) key that differs."""
    found = []
    for key in sorted(set(stored) | set(current), key=str):
        before, now = stored.get(key, _MISSING), current.get(key, _MISSING)
        if isinstance(before, Mapping) and isinstance(now, Mapping):
            found += [f"{key}.{d}" for d in config_differences(before, now)]
        elif before != now:
            found.append(f"{key}: {_value(before)} in the store, {_value(now)} now")
    return found


_MISSING = object()


def _value(value: Any) -> str:
    return "(not set)" if value is _MISSING else json.dumps(value, default=str)


def keys_to_skip(
    path: Path,
    records: Sequence[GroupRecord] | Sequence[ResumeFacts],
    current: RunIdentity,
    *,
    new_run: bool,
    config: Mapping[str, Any] | None = None,
) -> set[str]:
    """The keys a collection resuming into this store skips; refuses another run's store.

    ``config`` is the current env config; when the configs differ, the refusal names
    the keys that differ and both values, read from the store's last record.

    The store's latest run (that of its last record) must be this one, unless
    ``new_run`` asks to append a new run after it. Only this run's own ``ok``
    groups are skipped, so a new run appended to a file is never cut short by
    another run's records with the same keys. ``records`` may be whole records or
    their :class:`ResumeFacts` (what :meth:`TrajectoryStore.resume_facts` keeps).
    """
    if not records:
        return set()
    facts = [r if isinstance(r, ResumeFacts) else ResumeFacts.of(r) for r in records]
    last = facts[-1]
    differences = (
        current.differences(last.identity)
        if last.explicit
        else _known_differences(last.identity, current)
    )
    if differences and not new_run:
        if config is not None:
            differences = [_config_detail(d, path, config) for d in differences]
        raise RunMismatchError(
            f"{path} holds a different run ({'; '.join(differences)}): resuming would mix "
            "them. Write to a new file (another --out), or pass --new-run (new_run=True "
            "from Python) to append a new run to this one"
        )
    from agentenvs.rollout.collect.store import latest_outcomes

    latest = latest_outcomes(facts, slot=ResumeFacts.group_slot)
    return {f.key for f in latest if f.status == "ok" and _matches(f, current)}
