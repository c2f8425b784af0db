"""Push new weights to an OpenAI-compatible engine and prove they took.

One sync, on either path:

1. close the policy's gate: wait for requests in flight, hold new ones; gates
   linked to it close too (a Ray executor's, spanning the clients its actors
   built: :mod:`agentenvs.rollout.collect.executors.remote_gate`);
2. pause the engine where it can (``/pause?mode=wait``);
3. load: a LoRA adapter under a new name (``lora``), or an in-place reload of a
   full weights directory (``full``);
4. reset the prefix cache, always: after an in-place reload, prompts already in
   the cache keep the old weights' keys and values and the next rollout matches
   neither model (the probe shows it: :mod:`.probe`);
5. resume the engine, and verify: the server's logprobs on a fixed probe against
   the trainer's own forward pass of the new weights, and against the server's own
   answers under every other weights it could be serving: what it served before
   the load, its base checkpoint, every identity proven recently (:mod:`.proof`);
6. only on a match, move the policy to the new :class:`WeightsIdentity` (version,
   what was loaded, its hash, the probe's difference), keep the probe's answers as
   the identity's fingerprint (:mod:`.custody`), and open the gate. Every turn
   sampled afterwards is stamped with it, in the actors too (their gate opens
   with it).

A policy with several servers (``url="http://a,http://b"``, load-balanced) has
every one of them paused, loaded, reset and probed; it moves to the new identity
only when all match, as its next turn may go to any of them.

A failed verification raises :class:`VerificationError`. On the LoRA path the
server still has the previous adapter, so the policy keeps sampling with it; after
a failed full reload the server holds weights nobody vouches for, and the policy
refuses to sample until a sync succeeds.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from agentenvs.envs.weights_identity import SyncPath, WeightsIdentity, hash_weights
from agentenvs.rollout.policies.base import PolicyError
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.weights.custody import Fingerprint, same_files
from agentenvs.rollout.weights.engine import VLLMEngine, WeightSyncError, resume_all
from agentenvs.rollout.weights.probe import (
    Probe,
    ProbeResult,
    ReferenceLogprobs,
    VerificationError,
    score_on_server,
    score_with_reference,
    verify,
)
from agentenvs.rollout.weights.proof import Candidate, Tolerance
from agentenvs.rollout.weights.reprobe import resume_left_paused

T = TypeVar("T")

_GONE = frozenset({400, 404})
"""How vLLM refuses a model name it does not serve (an adapter a restart dropped)."""


@dataclass
class SyncReport:
    """What one sync did and how long each part took (seconds)."""

    identity: WeightsIdentity
    probe: ProbeResult
    load_s: float
    reset_s: float
    verify_s: float
    total_s: float
    paused: bool
    probes: list[ProbeResult] = field(default_factory=list)
    """Every server's probe (``probe`` is the one furthest from the new weights)."""
    before_s: float = 0.0
    """Scoring the servers before the load (what they served until now)."""
    drain_s: float = 0.0
    """Waiting for the requests in flight: until they finished, or (partial
    rollouts) until the aborted ones came back."""


@dataclass(frozen=True)
class _Before:
    """Each server's answers just before the load, and the name they were scored under."""

    model: str
    scores: dict[str, tuple[float, ...]]


class WeightSync:
    def __init__(
        self,
        policy: OpenAICompatPolicy,
        *,
        probe: Probe,
        dtype: str = "float32",
        tolerance: Tolerance | None = None,
        adapter_prefix: str | None = None,
        keep_adapters: int = 2,
    ) -> None:
        if policy.api != "vllm":
            raise ValueError("weight sync talks to vLLM's endpoints; the policy's api is not vllm")
        self.policy = policy
        self.engines = [VLLMEngine(policy, url) for url in policy.urls]
        """One per server the policy samples from: every one is loaded and verified."""
        self.engine = self.engines[0]
        self.probe = probe
        self.tolerance = Tolerance.for_dtype(dtype) if tolerance is None else tolerance
        # A name is loaded once per server: a fresh prefix per sync keeps two trainers
        # (or two runs) on one server from colliding.
        self.adapter_prefix = adapter_prefix or f"agentenvs-{uuid.uuid4().hex[:6]}"
        self.keep_adapters = max(1, keep_adapters)
        self.loaded_adapters: list[str] = []
        self.reports: list[SyncReport] = []

    def next_version(self) -> int:
        """One past the current version. A failed version's number is used again only
        when no turn was ever stamped with it as proven (a push that never verified);
        one that was proven and then lost (a restarted server) names those weights in
        the records, so new weights get a new number."""
        current = self.policy.weights_version
        never_proven = current not in self.policy.custody.proven_versions
        if self.policy.weights.failed and isinstance(current, int) and never_proven:
            return current
        if current is None:
            return 1
        if not isinstance(current, int):
            raise ValueError(f"weights version {current!r} is not an int; pass version=")
        return current + 1

    async def _abort_in_flight(self) -> None:
        """Every server's requests cut short (each answers with the tokens it sampled
        so far); the engines keep running, for the probes: the gate holds new turns."""
        for engine in self.engines:
            await engine.abort_requests()

    async def push_lora(
        self, adapter_dir: str | Path, reference: ReferenceLogprobs, *, version: int | None = None
    ) -> SyncReport:
        """Load a peft adapter directory under a fresh name and verify it."""
        version = self.next_version() if version is None else version
        name = f"{self.adapter_prefix}-v{version}"
        source = str(Path(adapter_dir).resolve())
        candidate = WeightsIdentity(
            version=version, path="lora", name=name, source=source, sha256=hash_weights(source)
        )
        try:
            report = await self._sync(
                candidate, reference, lambda engine: engine.load_lora(name, source), reset=True
            )
        except VerificationError:
            # Nothing samples by a name that did not verify; unloading it lets a retry
            # of the same version load it again (a name can be loaded once per server).
            await self._unload(name)
            raise
        self.loaded_adapters.append(name)
        await self._unload_old_adapters()
        return report

    async def push_full(
        self,
        weights_dir: str | Path,
        reference: ReferenceLogprobs,
        *,
        version: int | None = None,
        reset_prefix_cache: bool = True,
    ) -> SyncReport:
        """Reload the base model's weights in place from a directory and verify them.

        ``reset_prefix_cache=False`` exists to show the trap; a trainer never wants it.
        """
        version = self.next_version() if version is None else version
        source = str(Path(weights_dir).resolve())
        candidate = WeightsIdentity(
            version=version,
            path="full",
            name=await self.policy.model_name(),
            source=source,
            sha256=hash_weights(source),
        )
        return await self._sync(
            candidate,
            reference,
            lambda engine: engine.reload_weights(source),
            reset=reset_prefix_cache,
        )

    async def _sync(
        self,
        candidate: WeightsIdentity,
        reference: ReferenceLogprobs,
        load: Callable[[VLLMEngine], Awaitable[None]],
        *,
        reset: bool,
    ) -> SyncReport:
        started = time.perf_counter()
        # Gates linked to the policy's (a Ray executor's actors) reopen with whatever
        # identity the swap ends on: the verified one, or a failed reload's.
        # Every server is scored before the load (what it served until now), then
        # paused, loaded, reset, resumed and probed on its own; the policy moves to
        # the new identity only when all of them match, since the load balancer may
        # send the next turn to any of them.
        # Partial rollouts: the requests in flight are cut short (each goes on from its
        # sampled tokens once the gate opens) instead of being waited for.
        interrupt = self._abort_in_flight if self.policy.partial_rollouts else None
        async with self.policy.gate.swap(
            opens_with=lambda: self.policy.weights, interrupt=interrupt
        ):
            drained = time.perf_counter()
            await resume_left_paused(self.policy)
            previous = self.policy.weights
            before = await self._scores_before(candidate)
            prepared = time.perf_counter()
            paused, reset_s = await self._load_everywhere(candidate, load, reset)
            loaded = time.perf_counter()
            if candidate.path == "full":
                # The servers' weights changed whatever the probe says next.
                self.policy.weights = replace(candidate, failed="not verified yet")
            model = candidate.name or await self.policy.model_name()
            new = await score_with_reference(reference, self.probe)
            results = [
                await self._step(
                    candidate,
                    verify(
                        self.policy,
                        self.probe,
                        model,
                        reference,
                        self.tolerance,
                        candidates=self._candidates(candidate, previous, before, e.url),
                        new=new,
                        server=e.url,
                    ),
                )
                for e in self.engines
            ]
            mismatched = [r for r in results if not r.matches]
            if mismatched:
                self._refuse(candidate, mismatched[0])
            exact = await self._exact_identity(candidate)
            proven = (
                "verified" if all(r.status == "verified" for r in results) else "indistinguishable"
            )
            self.policy.weights = replace(
                candidate,
                verified=proven == "verified",
                proof=proven,
                probe_max_abs_diff=max(r.max_abs_diff for r in results),
                probe_power=min(r.separation.power for r in results),
                exact=exact,
                failed=None,
            )
            self.policy.custody.remember(
                Fingerprint(
                    identity=self.policy.weights,
                    probe=self.probe,
                    model=model,
                    scores={r.url: tuple(r.after) for r in results},
                    tolerance=max((r.tolerance for r in results), key=lambda t: t.repeat),
                )
            )
            await self.policy.instances.record()
            verified = time.perf_counter()
        report = SyncReport(
            identity=self.policy.weights,
            probe=max(results, key=lambda r: r.separation.to_new),
            load_s=loaded - prepared - reset_s,
            reset_s=reset_s,
            verify_s=verified - loaded,
            total_s=time.perf_counter() - started,
            drain_s=drained - started,
            paused=len(paused) == len(self.engines),
            probes=results,
            before_s=prepared - started,
        )
        self.reports.append(report)
        return report

    async def _load_everywhere(
        self, candidate: WeightsIdentity, load: Callable[[VLLMEngine], Awaitable[None]], reset: bool
    ) -> tuple[list[VLLMEngine], float]:
        """Pause, load, reset the prefix cache and resume every server: the servers
        paused, and the seconds the reset took. Every server paused is resumed, even
        when a later step failed (a server left paused holds every request sent to
        it); the first failure is the one raised."""
        paused: list[VLLMEngine] = []
        failure: BaseException | None = None
        loading = False
        reset_s = 0.0
        try:
            for engine in self.engines:
                if await engine.pause():
                    paused.append(engine)
            loading = True
            for engine in self.engines:
                await load(engine)
            if reset:
                reset_started = time.perf_counter()
                for engine in self.engines:
                    await engine.reset_prefix_cache()
                reset_s = time.perf_counter() - reset_started
        except BaseException as err:  # cancelled too: the servers must not stay paused
            failure = err
        self.policy.served.left_paused, unresumed = await resume_all(paused)
        if unresumed is not None:
            if failure is None:
                failure = unresumed
            else:
                failure.add_note(f"resuming the paused servers failed too: {unresumed}")
        if failure is not None:
            self._step_failed(candidate, failure, loading=loading)
            raise failure
        return paused, reset_s

    async def _scores_before(self, candidate: WeightsIdentity) -> _Before:
        """Each server's teacher-forced scores just before the load, under the name the
        policy samples with now. A server that no longer knows that name (an adapter a
        restart dropped) serves its base model: it is scored under that name instead.
        A policy still on its base checkpoint keeps the answers as the base's
        fingerprint, a candidate every later sync must tell its weights from."""
        base = await self.policy.model_name()
        model = self.policy.served_model() or base
        scores: dict[str, tuple[float, ...]] = {}
        for engine in self.engines:
            try:
                try:
                    scored = await score_on_server(self.policy, self.probe, model, engine.url)
                except PolicyError as err:
                    if err.status not in _GONE or model == base:
                        raise
                    model = base  # every server lost the adapter with the restart
                    scored = await score_on_server(self.policy, self.probe, model, engine.url)
            except PolicyError as err:
                self._step_failed(candidate, err, loading=False)
                raise WeightSyncError(
                    f"scoring the probe on {engine.url} before the load failed: {err}",
                    status=err.status,
                ) from None
            scores[engine.url] = tuple(scored)
        current = self.policy.weights
        if current.path == "base" and current.proof == "none" and model == base:
            self.policy.custody.remember(
                Fingerprint(current, self.probe, model, scores, self.tolerance)
            )
        return _Before(model, scores)

    def _candidates(
        self, candidate: WeightsIdentity, previous: WeightsIdentity, before: _Before, url: str
    ) -> list[Candidate]:
        """Everything else the server could be serving, as it answered the probe: the
        weights it served before the load (left out when the policy held these very
        weights already, a push of the same version again), and the recorded
        fingerprints of the base checkpoint and of recent identities (all but these
        weights)."""
        others: list[Candidate] = []
        if not (candidate.sha256 and previous.sha256 == candidate.sha256):
            others.append(Candidate("the weights served before the load", before.scores[url]))
        for fingerprint in self.policy.custody.candidates(self.probe):
            if same_files(fingerprint.identity, candidate):
                continue
            other = fingerprint.candidate(url)
            if other is not None:
                others.append(other)
        return others

    async def _step(
        self, candidate: WeightsIdentity, step: Awaitable[T], *, loading: bool = True
    ) -> T:
        """A sync step talking to a server: its failure takes the proof away."""
        try:
            return await step
        except (PolicyError, WeightSyncError) as err:
            self._step_failed(candidate, err, loading=loading)
            raise

    def _step_failed(
        self, candidate: WeightsIdentity, err: BaseException, *, loading: bool = True
    ) -> None:
        """A step failed: what the servers hold is unknown. Once a full reload began
        nobody vouches for them (sampling refused); otherwise the identity they had
        loses its proof until a re-probe shows it is still served."""
        if loading and candidate.path == "full":
            self.policy.weights = replace(candidate, failed=f"the sync failed: {err}")
        else:
            self.policy.custody.lose(f"a sync step failed: {err}")

    async def _exact_identity(self, candidate: WeightsIdentity) -> str | None:
        """The engine's own word, where it has one: an adapter is listed by its name."""
        if candidate.path != "lora":
            return None
        for engine in self.engines:
            listed = await self._step(candidate, engine.served_models())
            if candidate.name not in listed:
                self._refuse_unlisted(candidate, engine.url, listed)
        return "adapter listed by /v1/models on every server"

    def _refuse_unlisted(self, candidate: WeightsIdentity, url: str, listed: list[str]) -> None:
        raise VerificationError(
            f"weights version {candidate.version} ({candidate.label()}) did not verify: "
            f"{url}/v1/models does not list adapter {candidate.name} (it lists {listed}); "
            "the server keeps serving the previous adapter"
        )

    def _refuse(self, candidate: WeightsIdentity, result: ProbeResult) -> None:
        problem = result.describe() + (f" on {result.url}" if len(self.engines) > 1 else "")
        path: SyncPath = candidate.path
        if path == "full":
            self.policy.weights = replace(candidate, failed=problem)
        raise VerificationError(
            f"weights version {candidate.version} ({candidate.label()}) did not verify: {problem}; "
            + (
                "the server keeps serving the previous adapter"
                if path == "lora"
                else "sampling is refused until a sync verifies"
            )
        )

    async def unload_adapters(self) -> None:
        """Unload every adapter this sync loaded (at the end of a run)."""
        while self.loaded_adapters:
            await self._unload(self.loaded_adapters.pop())

    async def _unload_old_adapters(self) -> None:
        while len(self.loaded_adapters) > self.keep_adapters:
            await self._unload(self.loaded_adapters.pop(0))

    async def _unload(self, name: str) -> None:
        for engine in self.engines:
            with contextlib.suppress(WeightSyncError):  # already gone: nothing uses it now
                await engine.unload_lora(name)


__all__ = ["SyncReport", "VerificationError", "WeightSync", "WeightSyncError"]
