"""Which weights a server is sampling with, in a form every sample can carry.

A bare version number answers "how stale is this sample?" but not "which weights
were these?". The identity adds what was loaded (the base checkpoint, a LoRA
adapter by name, or a full weights directory), a content hash of it, and whether
the server's output was verified against the trainer's own forward pass before
the version was trusted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

SyncPath = Literal["base", "lora", "full"]
Proof = Literal["none", "verified", "indistinguishable", "lost"]

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".json")


@dataclass(frozen=True)
class WeightsIdentity:
    version: int | str | None = None
    path: SyncPath = "base"
    """``base``: what the server started with; ``lora``: an adapter; ``full``: a reload."""
    name: str | None = None
    """The name requests must use: the adapter's name, or the base model's."""
    source: str | None = None
    """The directory that was loaded."""
    sha256: str | None = None
    """Hash of the loaded files (:func:`hash_weights`)."""
    verified: bool = False
    """True only while the probe shows the server runs these weights and not the
    previous ones (:attr:`proof` ``verified``)."""
    probe_max_abs_diff: float | None = None
    failed: str | None = None
    """Set when the server holds weights nobody vouches for (a full reload that
    failed verification or a step of it, a server that restarted with other
    weights): the policy refuses to sample until a sync succeeds."""
    proof: Proof = "none"
    """What the probe showed of these weights on the server:

    * ``verified``: it agrees with the trainer's forward pass of them and is
      measurably far from the previous weights (:mod:`.proof`);
    * ``indistinguishable``: it agrees, but the update was too small for the probe
      to tell these weights from the previous ones at this dtype;
    * ``lost``: proven once, but a server was unreachable, restarted or failed a
      sync step since; sampling waits for a re-probe against what it served;
    * ``none``: never probed (the weights a server started with).
    """
    probe_power: float | None = None
    """How many noise tolerances the update moved the probe (:attr:`.proof.Separation.power`)."""
    exact: str | None = None
    """An exact check the engine answered beside the statistical one (a LoRA adapter
    listed by the server by its name), or None when there is none."""

    def label(self) -> str:
        """A short string for per-turn logs: ``lora:grpo-v3@1a2b3c4d``."""
        head = f"{self.path}:{self.name or self.source or '?'}"
        return f"{head}@{self.sha256[:8]}" if self.sha256 else head

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WeightsIdentity:
        """Read back :meth:`to_json`; fields it does not know are ignored, so a record
        written by a newer version still reads."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def hash_weights(directory: str | Path) -> str:
    """sha256 over the weight and config files of a checkpoint or adapter directory.

    File names go into the hash with their contents, in sorted order, so the same
    files give the same hash wherever they are; READMEs and the like are left out.
    """
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"no weights directory at {root}")
    digest = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in _WEIGHT_SUFFIXES)
    if not files:
        raise FileNotFoundError(f"{root} holds no weight files ({', '.join(_WEIGHT_SUFFIXES)})")
    for file in files:
        digest.update(str(file.relative_to(root)).encode() + b"\0")
        with file.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]
