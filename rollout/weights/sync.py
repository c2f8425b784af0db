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
   the trainer's own forward pass of the new weights;
6. only on a match, move the policy to the new :class:`WeightsIdentity` (version,
   what was loaded, its hash, the probe's difference) and open the gate. Every
   turn sampled afterwards is stamped with it, in the actors too (their gate opens
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
from dataclasses import dataclass, field, replace
from pathlib import Path

from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.weights.engine import VLLMEngine, WeightSyncError
from agentenvs.rollout.weights.identity import SyncPath, WeightsIdentity, hash_weights
from agentenvs.rollout.weights.probe import (
    TOLERANCE,
    Probe,
    ProbeResult,
    ReferenceLogprobs,
    VerificationError,
    verify,
)


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
    """Every server's probe (``probe`` is the worst of them)."""


class WeightSync:
    def __init__(
        self,
        policy: OpenAICompatPolicy,
        *,
        probe: Probe,
        dtype: str = "float32",
        tolerance: float | None = None,
        adapter_prefix: str | None = None,
        keep_adapters: int = 2,
    ) -> None:
        if policy.api != "vllm":
            raise ValueError("weight sync talks to vLLM's endpoints; the policy's api is not vllm")
        if tolerance is None and dtype not in TOLERANCE:
            raise ValueError(f"no default tolerance for dtype {dtype!r}; pass tolerance=")
        self.policy = policy
        self.engines = [VLLMEngine(policy, url) for url in policy.urls]
        """One per server the policy samples from: every one is loaded and verified."""
        self.engine = self.engines[0]
        self.probe = probe
        self.tolerance = TOLERANCE[dtype] if tolerance is None else tolerance
        # A name is loaded once per server: a fresh prefix per sync keeps two trainers
        # (or two runs) on one server from colliding.
        self.adapter_prefix = adapter_prefix or f"agentenvs-{uuid.uuid4().hex[:6]}"
        self.keep_adapters = max(1, keep_adapters)
        self.loaded_adapters: list[str] = []
        self.reports: list[SyncReport] = []

    def next_version(self) -> int:
        """One past the last verified version (a failed one was never trusted: reused)."""
        current = self.policy.weights_version
        if self.policy.weights.failed and isinstance(current, int):
            return current
        if current is None:
            return 1
        if not isinstance(current, int):
            raise ValueError(f"weights version {current!r} is not an int; pass version=")
        return current + 1

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

    async def _sync(self, candidate, reference, load, *, reset: bool) -> SyncReport:
        started = time.perf_counter()
        # Gates linked to the policy's (a Ray executor's actors) reopen with whatever
        # identity the swap ends on: the verified one, or a failed reload's.
        # Every server is paused, loaded, reset, resumed and verified on its own; the
        # policy moves to the new identity only when all of them match, since the
        # load balancer may send the next turn to any of them.
        async with self.policy.gate.swap(opens_with=lambda: self.policy.weights):
            paused: list[VLLMEngine] = []
            try:
                for engine in self.engines:
                    if await engine.pause():
                        paused.append(engine)
                for engine in self.engines:
                    await load(engine)
                loaded = time.perf_counter()
                if reset:
                    for engine in self.engines:
                        await engine.reset_prefix_cache()
                reset_done = time.perf_counter()
            finally:
                # Every server paused so far is resumed, even when a later one failed:
                # a server left paused would hold every request sent to it.
                await _resume_all(paused)
            if candidate.path == "full":
                # The servers' weights changed whatever the probe says next.
                self.policy.weights = replace(candidate, failed="not verified yet")
            model = candidate.name or await self.policy.model_name()
            results = [
                await verify(self.policy, self.probe, model, reference, self.tolerance, e.url)
                for e in self.engines
            ]
            result = max(results, key=lambda r: r.max_abs_diff)
            verified = time.perf_counter()
            if not result.matches:
                self._refuse(candidate, result)
            self.policy.weights = replace(
                candidate, verified=True, probe_max_abs_diff=result.max_abs_diff, failed=None
            )
        report = SyncReport(
            identity=self.policy.weights,
            probe=result,
            load_s=loaded - started,
            reset_s=reset_done - loaded,
            verify_s=verified - reset_done,
            total_s=time.perf_counter() - started,
            paused=len(paused) == len(self.engines),
            probes=results,
        )
        self.reports.append(report)
        return report

    def _refuse(self, candidate: WeightsIdentity, result: ProbeResult) -> None:
        problem = (
            f"probe max |logprob diff| {result.max_abs_diff:.3g} > tolerance {result.tolerance:g}"
            + (f" on {result.url}" if len(self.engines) > 1 else "")
        )
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


async def _resume_all(engines: list[VLLMEngine]) -> None:
    """Resume each engine; the first failure is raised once all were tried."""
    failure: WeightSyncError | None = None
    for engine in engines:
        try:
            await engine.resume()
        except WeightSyncError as err:
            failure = failure or err
    if failure is not None:
        raise failure


__all__ = ["SyncReport", "VerificationError", "WeightSync", "WeightSyncError"]
