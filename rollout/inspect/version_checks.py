"""Which weights sampled each trajectory: versions, staleness, proofs, the drift log.

A turn is stamped by the policy that served it (``policy/weights_version``,
``policy/weights``, ``policy/weights_proof``; ``rollout/weights/stamps.py``). A
trajectory is as stale as the oldest weights that produced any of its tokens, so its
version is the oldest of its turns' stamps, and its record must claim exactly the
oldest stamp of the group (the collector writes it so). A version newer than the
trainer's current one is no staleness at all but an error (weights that do not exist
yet), and a turn trained on must be vouched for by its weights proof: ``lost`` (the
server restarted or dropped a connection since the proof), ``failed``, or no proof
at all on weights a sync loaded are refused under ``--require-verified`` (on by
default for stores that carry proofs). ``indistinguishable`` (the server agreed with
the new weights, the update was too small to tell apart from the previous ones) is
accepted and counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from agentenvs.rollout.data.samples import PARSE_ERROR_MASKED_METRIC
from agentenvs.rollout.inspect.findings import Check, Finding
from agentenvs.rollout.inspect.groups import FirstFailure, GroupView
from agentenvs.rollout.inspect.options import CheckOptions
from agentenvs.rollout.inspect.token_version_checks import store_runs_problem
from agentenvs.rollout.weights.drift import DriftReport, alarmed_keys
from agentenvs.rollout.weights.stamps import VERSION_LOG, WEIGHTS_LOG

PROOF_LOG = "policy/weights_proof"
"""The per-turn log key of the served weights' proof (``WeightsIdentity.proof``)."""
ACCEPTED_PROOFS = frozenset({"verified", "indistinguishable"})
"""Proofs a trained turn may carry under ``--require-verified``."""
UNPROVEN_PATHS = frozenset({"base"})
"""Weights labels (``path:name@hash``) that need no proof: what a server started with."""

_NOT_A_VERSION = object()


def _number(version: Any) -> Any:
    """A version as an ordered number, or a marker for one that is not a number."""
    if isinstance(version, bool):
        return _NOT_A_VERSION
    if isinstance(version, int | float):
        return version
    try:
        return int(str(version))
    except ValueError:
        return _NOT_A_VERSION


def _trained(transition: Any) -> bool:
    return float(transition.metrics.get(PARSE_ERROR_MASKED_METRIC, 0.0)) < 1.0


class VersionsCheck:
    """Staleness per trajectory (its oldest stamp), stamps against the record, proofs."""

    def __init__(self, options: CheckOptions) -> None:
        self.current = options.current_version
        self.bound = options.max_staleness
        self.require = options.require_verified
        self.histogram: Counter[int] = Counter()
        self.versions: Counter[str] = Counter()
        self.unversioned = 0
        self.first_unversioned = ""
        self.stale = FirstFailure()
        self.stamps = FirstFailure()
        self.proofs: Counter[str] = Counter()
        self.proof_problem = FirstFailure()

    # ---- per group -------------------------------------------------------------------
    def add(self, view: GroupView) -> None:
        policy = view.record.provenance.get("policy") or {}
        claimed = policy.get("weights_version")
        oldest: tuple[Any, str] | None = None
        for t, traj in view.trajectories():
            stamped = [
                (tr.logs[VERSION_LOG], view.where(t, turn))
                for turn, tr in enumerate(traj.transitions)
                if VERSION_LOG in tr.logs
            ]
            version, place = claimed, view.where(t)
            if stamped:  # judged by its oldest stamp, named by the turn that carries it
                version, place = min(stamped, key=lambda s: _order(s[0]))
                if oldest is None or _order(version) < _order(oldest[0]):
                    oldest = (version, place)
            self._judge(version, place)
            self._proofs(view, t, traj)
        self._record_claim(view, policy, claimed, oldest)
        broken = store_runs_problem(view.record, view.trajectories())
        if broken is not None and not self.stamps.found:
            problem, t, turn = broken
            detail = f"a turn's per-token versions cannot be true: {problem}"
            self.stamps.keep(
                Finding(Check.COMPLETION_BOUNDARIES, "fail", detail, view.where(t, turn))
            )

    def _record_claim(
        self, view: GroupView, policy: Mapping[str, Any], claimed: Any, oldest: Any
    ) -> None:
        if self.stamps.found:
            return
        if oldest is not None and claimed != oldest[0]:
            version, place = oldest
            older = claimed is not None and _order(version) < _order(claimed)
            detail = (
                f"a turn is stamped with weights version {version!r}, older than the "
                f"{claimed!r} its record claims: the group's staleness is judged by its oldest "
                "tokens"
                if older
                else f"the record claims weights version {claimed!r} but its oldest turn is "
                f"stamped {version!r}: a stamp newer than the record"
            )
            self.stamps.keep(Finding(Check.COMPLETION_BOUNDARIES, "fail", detail, place))
            return
        weights = policy.get("weights")
        if isinstance(weights, Mapping) and "version" in weights and weights["version"] != claimed:
            detail = (
                f"the record claims weights version {claimed!r} but names the identity of "
                f"version {weights['version']!r}"
            )
            self.stamps.keep(Finding(Check.COMPLETION_BOUNDARIES, "fail", detail, view.where()))

    def _judge(self, version: Any, where: str) -> None:
        if version is None:
            self.unversioned += 1
            self.first_unversioned = self.first_unversioned or where
            return
        self.versions[str(version)] += 1
        if self.current is None:
            return
        number = _number(version)
        if number is _NOT_A_VERSION:
            detail = f"weights version {version!r} is not a number"
            self.stale.keep(Finding(Check.COMPLETION_BOUNDARIES, "fail", detail, where))
            return
        staleness = int(self.current) - int(number)
        self.histogram[staleness] += 1
        if staleness < 0:
            detail = (
                f"sampled by weights version {version!r}, newer than the current version "
                f"{self.current}: weights the trainer does not have (negative staleness)"
            )
            self.stale.keep(Finding(Check.COMPLETION_BOUNDARIES, "fail", detail, where))
        elif self.bound is not None and staleness > self.bound:
            detail = f"samples {staleness} versions behind (max allowed {self.bound})"
            self.stale.keep(Finding(Check.COMPLETION_BOUNDARIES, "fail", detail, where))

    def _proofs(self, view: GroupView, t: int, traj: Any) -> None:
        for turn, tr in enumerate(traj.transitions):
            proof = tr.logs.get(PROOF_LOG)
            label = str(tr.logs.get(WEIGHTS_LOG, ""))
            if proof is None and (not label or label.split(":", 1)[0] in UNPROVEN_PATHS):
                continue  # unstamped, or the weights a server started with
            name = str(proof) if proof is not None else "none"
            self.proofs[name] += 1
            if _trained(tr) and name not in ACCEPTED_PROOFS and not self.proof_problem.found:
                why = (
                    f"weights proof {name!r}"
                    if proof is not None
                    else f"no weights proof for synced weights {label!r}"
                )
                self.proof_problem.keep(
                    Finding(
                        Check.COMPLETION_BOUNDARIES,
                        "fail",
                        f"a trained turn was sampled under {why}: the server was not shown to "
                        "run the weights the turn claims (--no-require-verified to accept)",
                        view.where(t, turn),
                    )
                )

    # ---- at the end ------------------------------------------------------------------
    def findings(self) -> list[Finding]:
        found = self._staleness()
        if self.stamps.finding is not None:
            found.append(self.stamps.finding)
        found += self._proof_findings()
        return found

    def _staleness(self) -> list[Finding]:
        if not self.versions:
            if self.bound is not None:  # asked for a guarantee the data cannot give
                detail = "cannot check staleness: no weights version recorded"
                return [Finding(Check.COMPLETION_BOUNDARIES, "fail", detail)]
            return [Finding(Check.COMPLETION_BOUNDARIES, "warn", "no weights version recorded")]
        if self.current is None:
            if self.bound is not None:
                detail = "cannot check staleness without the current version (pass --current-version)"  # fmt: skip
                return [Finding(Check.COMPLETION_BOUNDARIES, "fail", detail)]
            detail = (
                f"weights versions present (per trajectory): {dict(self.versions)} (pass "
                "--current-version to judge)"
            )
            found = [Finding(Check.COMPLETION_BOUNDARIES, "pass", detail)]
        else:
            text = ", ".join(f"{s}: {n}" for s, n in sorted(self.histogram.items()))
            detail = f"staleness histogram (per trajectory, by its oldest stamp) {{{text}}}"
            found = [Finding(Check.COMPLETION_BOUNDARIES, "pass", detail)]
        if self.stale.finding is not None:
            found.append(self.stale.finding)
        if self.unversioned:
            # Under a staleness bound a trajectory that cannot be judged is refused, as
            # samples_from_records refuses it; without one it is only pointed out.
            strict = self.bound is not None
            detail = f"{self.unversioned} trajectories have no weights version" + (
                ": their staleness cannot be bounded" if strict else ""
            )
            first = f"first: {self.first_unversioned}"
            found.append(Finding(Check.COMPLETION_BOUNDARIES, "fail" if strict else "warn", detail, first))  # fmt: skip
        return found

    def _proof_findings(self) -> list[Finding]:
        if not self.proofs:
            return []
        counts = ", ".join(f"{name} {n}" for name, n in sorted(self.proofs.items()))
        require = self.require if self.require is not None else True
        if self.proof_problem.finding is not None and require:
            return [self.proof_problem.finding, Finding(
                Check.COMPLETION_BOUNDARIES, "info", f"weights proofs of the run's turns: {counts}"
            )]  # fmt: skip
        status = "pass" if self.proof_problem.finding is None else "warn"
        rule = "" if require else " (--no-require-verified: not required)"
        detail = f"weights proofs of the run's turns: {counts}{rule}"
        return [Finding(Check.COMPLETION_BOUNDARIES, status, detail)]


def _order(version: Any) -> tuple[int, Any]:
    number = _number(version)
    return (0, number) if number is not _NOT_A_VERSION else (1, str(version))


class DriftCheck:
    """The trainer's drift reports (``--drift``): a record of a batch whose on-policy
    tokens disagreed with the trainer fails (its sampler did not run the weights it
    claims); records no report covers are counted."""

    def __init__(self, reports: Sequence[DriftReport]) -> None:
        self.reports = reports
        self.refused = alarmed_keys(reports)
        self.covered = {k for r in reports for v in r.versions for k in v.keys}
        self.uncovered = 0
        self.first = FirstFailure()

    def add(self, view: GroupView) -> None:
        if view.key in self.refused:
            detail = self.refused[view.key]
            self.first.keep(Finding(Check.COMPLETION_BOUNDARIES, "fail", detail, view.where()))
        if view.key not in self.covered:
            self.uncovered += 1

    def findings(self) -> list[Finding]:
        found = [self.first.finding] if self.first.finding is not None else []
        on_policy = [v for r in self.reports for v in r.versions if v.on_policy]
        tokens = sum(v.tokens for v in on_policy)
        worst = max((v.rms for v in on_policy), default=0.0)
        alarmed = sum(r.alarm is not None for r in self.reports)
        detail = (
            f"drift: {len(self.reports)} steps, {tokens} on-policy tokens compared with the "
            f"trainer, worst rms {worst:.3g}; {alarmed} alarmed"
        )
        found.append(Finding(Check.COMPLETION_BOUNDARIES, "pass" if tokens else "warn", detail))
        if self.uncovered:
            detail = f"{self.uncovered} groups appear in no drift report (not trained on yet)"
            found.append(Finding(Check.COMPLETION_BOUNDARIES, "info", detail))
        return found
