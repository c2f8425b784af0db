"""Which fingerprint a lost proof is re-probed with, and which candidates a sync is shown.

The real-server half is ``test_vllm_weights_custody.py`` (a restart with two syncs on
one policy); here the bookkeeping alone, at a length no real run reaches quickly.
"""

from __future__ import annotations

from dataclasses import replace

from agentenvs.envs.weights_identity import WeightsIdentity
from agentenvs.rollout.weights.custody import SEEN, Fingerprint, WeightsCustody
from agentenvs.rollout.weights.probe import Probe
from agentenvs.rollout.weights.proof import Tolerance

PROBE = Probe.default(500)


def _pushed(version: int, files: str) -> WeightsIdentity:
    return WeightsIdentity(
        version=version, path="full", name="m", sha256=files, verified=True, proof="verified"
    )


def _fingerprint(identity: WeightsIdentity, probe: Probe = PROBE) -> Fingerprint:
    scores = {"http://a": (float(identity.version or 0),) * probe.scored_tokens}
    return Fingerprint(identity, probe, "m", scores, Tolerance.for_dtype("float32"))


def test_the_base_fingerprint_outlives_any_number_of_syncs_and_files_are_kept_once():
    custody = WeightsCustody(WeightsIdentity(version=0))
    custody.remember(_fingerprint(WeightsIdentity(version=0)))
    for version in range(1, 3 * SEEN):
        custody.remember(_fingerprint(_pushed(version, f"files-{version}")))
    kept = custody.candidates(PROBE)
    assert kept[0].identity.path == "base" and len(kept) == 1 + SEEN
    # The same files pushed again under a new version: one candidate, the newest.
    custody.remember(_fingerprint(_pushed(99, f"files-{3 * SEEN - 1}")))
    again = [
        f.identity.version
        for f in custody.candidates(PROBE)
        if f.identity.version in (99, 3 * SEEN - 1)
    ]
    assert again == [99]
    assert custody.candidates(Probe.default(500, length=160)) == []  # another probe's: none


async def test_a_lost_identity_is_reprobed_by_its_own_fingerprint_and_an_unknown_one_stays_lost():
    reprobed: list[object] = []

    async def reprobe(fingerprint: Fingerprint) -> None:
        reprobed.append(fingerprint.identity.version)
        custody.identity = fingerprint.identity

    custody = WeightsCustody(WeightsIdentity(version=0), reprobe=reprobe)
    v1 = _pushed(1, "files-1")
    custody.identity = v1
    custody.remember(_fingerprint(v1))
    custody.lose("a connection was cut")
    await custody.ensure_proven()
    assert reprobed == [1] and custody.identity == v1
    # A version claimed by hand (no sync proved it): no fingerprint restores it.
    custody.identity = replace(v1, version=2)
    custody.lose("a connection was cut")
    await custody.ensure_proven()
    assert reprobed == [1] and custody.identity.proof == "lost" and not custody.identity.verified
    assert custody.proven_versions == {1, 2}  # 2 was stamped "verified" before the loss
