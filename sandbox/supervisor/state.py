"""What every part of the supervisor shares: its config, confinement and session family.

The supervisor's jobs live in separate modules (start-up, stateless runs, sessions,
reset, the self-check, the request loop); each gets this one object instead of the
supervisor itself, so no module needs to import the loop that drives it (``server``),
and ``sessions``/``session_table`` do not import each other in a circle.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Protocol

from .processes import Sweeper
from .restrictions import Landlock
from .sealing import Exposure


class HeldProcess(Protocol):
    """A session's state holder as the family and its table see it (``sessions.Holder``)."""

    pid: int
    seq: int
    """Cells run so far (a fork starts from its parent's count)."""
    nested: list
    """Holders whose Landlock domain is nested in this one's (see ``sessions.Holder``)."""

    def alive(self) -> bool: ...

    def close(self) -> None: ...

    def fork(self) -> HeldProcess | str: ...

    def run_cell(self, req: dict) -> dict: ...

    def check_parked(self) -> None: ...


@dataclass
class Family:
    """The sessions of this worker: the one ``session_open`` made and its forks.

    Held here rather than in ``session_table`` because every sweep (stateless runs,
    cells, forks) must spare all of their holders.
    """

    holders: dict[int, HeldProcess] = field(default_factory=dict)
    """Session id -> its state holder."""
    forked: bool = False
    """A session of this worker has forked: every holder is read-only from now on."""

    def any(self) -> HeldProcess | None:
        return next(iter(self.holders.values()), None)

    def holder_pids(self) -> set[int]:
        """The processes a sweep must spare: every live session's state holder."""
        return {holder.pid for holder in self.holders.values() if holder.alive()}

    def check_parked(self) -> None:
        """Stop again any parked holder something resumed (``Holder.check_parked``).

        Also run from the ``SIGCHLD`` handler, i.e. between any two bytecodes of the
        supervisor: nothing may escape from it into the code it interrupted.
        """
        for holder in list(self.holders.values()):
            with contextlib.suppress(Exception):
                holder.check_parked()


@dataclass
class WorkerState:
    """The supervisor's shared state (see the module docstring)."""

    config: dict
    workdir: str
    sweeper: Sweeper
    landlock: Landlock | None = None
    """Where a child may write (the work dir, the scratch dirs); ``None``: no Landlock."""
    read_only_landlock: Landlock | None = None
    """The Landlock of holders once a session forked (``forking``): no writes at all."""
    pending_reap: list[int] = field(default_factory=list)
    """Killed processes whose reaping waits until the answer is sent."""
    family: Family = field(default_factory=Family)
    exposure: Exposure | None = None
    """What the mounts let a run change (``seal``); ``None``: not sealed, no code runs."""

    def holder_landlock(self) -> Landlock | None:
        """What a new holder is confined by: read-only once any session of this worker forked."""
        return self.read_only_landlock if self.family.forked else self.landlock
