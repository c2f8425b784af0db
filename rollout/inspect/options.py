"""What ``agentenvs check`` is asked to judge, in one frozen value.

The command grew an option per guarantee (staleness bounds, text trainers, replay,
proofs, health); one dataclass carries them from the CLI or Python to every check,
so no function on the way takes a dozen keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Literal

DEFAULT_MAX_PARSE_FAILURES = 0.02
"""The share of declared-format tool-call attempts that may fail to parse."""

ROUND_TRIP_SAMPLES = 64
"""Samples whose decode -> encode round trip is measured when no text trainer is
named (the measurement is information then, and costs most of a check's time)."""

HealthRule = Literal["fail", "warn"]


@dataclass(frozen=True)
class CheckOptions:
    """The settings of one ``check`` (each field is a CLI option of the same name)."""

    current_version: int | None = None
    """The trainer's weights version now; staleness is judged against it."""
    max_staleness: int | None = None
    """Fail a trajectory sampled more versions behind than this."""
    text_trainer: bool = False
    """Fail samples whose decoded text re-tokenizes to other ids (every sample is
    measured then; otherwise the first :data:`ROUND_TRIP_SAMPLES`, as information)."""
    max_tool_parse_failures: float = DEFAULT_MAX_PARSE_FAILURES
    replay: bool = False
    """Re-run every episode of a deterministic environment from its record and
    compare what it gives with what was stored (``inspect/replay.py``)."""
    require_verified: bool | None = None
    """Fail trained turns whose weights proof is lost, failed or missing; None: on
    when the store carries any proof (``inspect/version_checks.py``)."""
    health: HealthRule = "fail"
    """``warn`` downgrades run-health failures (see :data:`findings.Kind`)."""
    against_version: str | None = None
    """A reward version (``2`` or ``name@2``) the user accepts to regrade under when
    the installed reward code differs from the recorded code."""

    @classmethod
    def of(cls, options: CheckOptions | None = None, **fields_: Any) -> CheckOptions:
        """``options`` with some fields replaced (keyword arguments of the checks'
        public functions); an unknown name is a TypeError naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(fields_) - known)
        if unknown:
            raise TypeError(f"unknown check option(s): {', '.join(unknown)}")
        return replace(options or cls(), **fields_)
