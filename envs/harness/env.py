"""``HarnessEnv``: an episode in which an external agent CLI works on a task.

The episode turns the usual order around. The harness, not the collector, decides when
the model is asked: it runs in its jail (``jail.py``) with its base URL on this
episode's gateway session (``server.py`` on a Unix socket that only this jail sees),
and each request it sends becomes the episode's next *observation*: the prompt tokens
of the turn (``segments.py``). The collector samples the action as for any env, and
:meth:`HarnessEnv.step` hands the sampled tokens back to the waiting request as the
API's reply, then waits for the harness's next request. When the harness exits (or
runs out of time or turns), the task's own tests run in a fresh jail and their reward
ends the episode.

So a harness episode is an ordinary token-level episode: it works under ``collect``,
groups, Ray and ``agentenvs rollout``, with the collector's seeds, stamps and checks,
and GRPO compares whole episodes. Its turns are in the order they were served; a turn
that does not extend the one before (a sub-agent, a compaction, a rewritten history)
is a prefix break the training samples split at, and each turn's logs name its
segment, parent and shared prefix for ``agentenvs check``. Requests that arrive while
a turn is being sampled wait their turn: the collector samples one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.harness.conversation import Reply
from agentenvs.envs.harness.harnesses import Harness, Installed, RunSettings, write_files
from agentenvs.envs.harness.jail import (
    SOCKET_NAME,
    Jail,
    JailResult,
    JailSpec,
    home,
    run_jailed,
    workdir,
)
from agentenvs.envs.harness.replies import ReplyReader, sniff_format
from agentenvs.envs.harness.segments import (
    SAMPLED_TOKENS_METRIC,
    SegmentTree,
    TreeOptions,
    Turn,
    session_renderer,
)
from agentenvs.envs.harness.server import KEEP_ALIVE_SECONDS, GatewaySession, build_app
from agentenvs.envs.harness.task import HarnessTask, read_reward
from agentenvs.envs.tokenizer_fingerprint import chat_template_of
from agentenvs.envs.tool_calls import CallFormat
from agentenvs.envs.types import (
    Action,
    ActionExtra,
    Env,
    Metrics,
    Observation,
    StepResult,
    StopCondition,
    StopReason,
    TokensWithLogprobs,
    stop_metric,
)


class HarnessError(AgentEnvsError, RuntimeError):
    """The harness could not run the episode (it ended before asking the model anything)."""


@dataclass(frozen=True)
class HarnessSettings:
    """What every episode of one configuration shares."""

    harness: Harness
    installed: Installed
    tool_format: CallFormat | None = None
    tree: TreeOptions = field(default_factory=TreeOptions)
    max_turns: int = 30
    agent_timeout: float | None = None
    """Overrides the task's ``[agent] timeout_sec``."""
    memory_mb: int | None = None


class _Session:
    """The episode's one session, whatever key a request names."""

    def __init__(self, session: GatewaySession, model: str) -> None:
        self._session = session
        self._model = model

    def session(self, key: str | None) -> GatewaySession:
        return self._session

    @property
    def model_name(self) -> str:
        return self._model


class _Handoff:
    """The session's turn runner: a request waits until the episode serves it."""

    def __init__(self, queue: asyncio.Queue[tuple[Turn, asyncio.Future[Reply]]]) -> None:
        self.queue = queue

    async def run(self, tree: SegmentTree, turn: Turn) -> Reply:
        waiting: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self.queue.put_nowait((turn, waiting))
        return await waiting


async def serve_unix(app: Any, path: Path) -> tuple[Any, asyncio.Task[None]]:
    """uvicorn serving ``app`` on the Unix socket ``path`` (mode 0666: the jail's uid
    connects; only the jail that mounts its folder can see it)."""
    import uvicorn

    config = uvicorn.Config(
        app,
        uds=str(path),
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    os.chmod(path, 0o666)
    return server, task


class HarnessEnv(Env):
    """One episode of ``settings.harness`` on ``task`` (see the module docstring)."""

    def __init__(self, task: HarnessTask, tokenizer: Any, settings: HarnessSettings) -> None:
        self.task = task
        self.tokenizer = tokenizer
        self.settings = settings
        renderer = session_renderer(tokenizer)
        template = chat_template_of(tokenizer)
        reader = ReplyReader(renderer, settings.tool_format or sniff_format(template))
        self.tree = SegmentTree(renderer, reader, key=task.name, options=settings.tree)
        self.queue: asyncio.Queue[tuple[Turn, asyncio.Future[Reply]]] = asyncio.Queue()
        self.root: Path | None = None
        self.jail: Jail | None = None
        self.exited: asyncio.Future[JailResult] | None = None
        self.current: Turn | None = None
        self.waiting: asyncio.Future[Reply] | None = None
        self.sampled = 0
        self.reason = StopReason.COMPLETED.value
        self._server: Any = None
        self._serving: asyncio.Task[None] | None = None

    def label(self) -> str:
        return f"harness {self.settings.harness.name} on {self.task.name}"

    def max_action_tokens(self) -> int | None:
        return None if self.current is None else self.current.max_tokens

    # ---- the episode ---------------------------------------------------------------------
    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        self.root = Path(tempfile.mkdtemp(prefix="agentenvs-harness-"))
        os.chmod(self.root, 0o711)  # the jails' uids pass through to their own folders
        gateway = self.root / "gateway"
        gateway.mkdir()
        session = GatewaySession(self.task.name, self.tree, _Handoff(self.queue))
        app = build_app(_Session(session, self.settings.tree.model))
        self._server, self._serving = await serve_unix(app, gateway / SOCKET_NAME)
        run = RunSettings(self.task.instruction, self.settings.tree.model, self.settings.max_turns)
        launch = self.settings.harness.launch(self.settings.installed, run)
        spec = JailSpec(
            command=launch.command,
            root=self.root / "agent",
            env=launch.env,
            readonly=launch.readonly,
            gateway=gateway,
            timeout=self.settings.agent_timeout or self.task.agent_timeout,
            memory_mb=self.settings.memory_mb or self.task.memory_mb or 4096,
        )
        workdir(spec).mkdir(parents=True)
        if self.task.workdir is not None:
            shutil.copytree(self.task.workdir, workdir(spec), dirs_exist_ok=True)
        write_files(home(spec), launch.files)
        self.jail = await Jail.start(spec)
        self.exited = asyncio.ensure_future(self.jail.wait())
        turn = await self._next()
        if turn is None:
            result = await self.exited
            raise HarnessError(
                f"{self.label()} ended before asking the model anything (exit "
                f"{result.returncode}, timed out: {result.timed_out}): {result.output[-1500:]}"
            )
        return list(turn.tokens), list(turn.stop)

    async def _next(self) -> Turn | None:
        """The next request to serve, or None once the harness has exited."""
        assert self.exited is not None
        while True:
            if self.exited.done():
                return None
            getter = asyncio.ensure_future(self.queue.get())
            await asyncio.wait({getter, self.exited}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                return None
            turn, waiting = getter.result()
            if not waiting.done():  # a request whose client is gone is not served
                self.current, self.waiting = turn, waiting
                return turn

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        turn, tree = self.current, self.tree
        assert turn is not None and self.waiting is not None
        stop_reason = (extra or {}).get("stop_reason", "stop")
        reply = tree.complete(turn, TokensWithLogprobs(list(action), None, stop_reason))
        if not self.waiting.done():
            self.waiting.set_result(reply)
        position = len(tree.done) - 1
        logs = tree.annotate(turn, position, tree.done, self.sampled)
        if position == 0:
            logs.update(tree.controls_log(turn.tokens, None))
        self.sampled += len(action)
        if len(tree.done) >= self.settings.max_turns and self.jail is not None:
            self.reason = StopReason.MAX_TURNS.value
            await self.jail.kill()
        following = await self._next()
        if following is not None:
            logs.update(tree.controls_log(following.tokens, turn.context()))
            metrics = tree.step_metrics(turn, following)
            return StepResult(
                0.0, False, list(following.tokens), list(following.stop), metrics, logs
            )
        return await self._finish(logs)

    async def _finish(self, logs: dict) -> StepResult:
        assert self.exited is not None
        result = await self.exited
        if result.timed_out:
            self.reason = StopReason.ROLLOUT_TIMEOUT.value
        reward, verifier = await self._verify()
        metrics: Metrics = {
            SAMPLED_TOKENS_METRIC: self.sampled,
            stop_metric(self.reason): 1,
            "harness/exit_code": -1 if result.returncode is None else result.returncode,
            "harness/seconds": round(result.seconds, 3),
            "harness/verifier_exit_code": -1
            if verifier.returncode is None
            else verifier.returncode,
        }
        logs = {
            **logs,
            "harness/output": result.output[-2000:],
            "harness/verifier_output": verifier.output[-2000:],
        }
        return StepResult(reward, True, [], [], metrics, logs)

    async def _verify(self) -> tuple[float, JailResult]:
        """The task's tests on the agent's work dir, in a fresh jail without network."""
        assert self.root is not None and self.jail is not None
        logs = self.root / "verifier-logs"
        spec = JailSpec(
            command=["bash", "/tests/test.sh"],
            root=self.root / "verifier",
            app=workdir(self.jail.spec),
            mounts={"/tests": self.task.tests},
            writable={"/logs": logs},
            timeout=self.task.verifier_timeout,
            memory_mb=self.task.memory_mb or 4096,
        )
        result = await run_jailed(spec)
        return read_reward(logs / "verifier", result.returncode), result

    async def close(self) -> None:
        if self.jail is not None:
            await self.jail.kill()
            if self.exited is not None:
                with contextlib.suppress(Exception):
                    await self.exited
            self.jail.release()
        while not self.queue.empty():
            _, waiting = self.queue.get_nowait()
            waiting.cancel()
        if self.waiting is not None and not self.waiting.done():
            self.waiting.cancel()
        if self._server is not None:
            self._server.should_exit = True
            if self._serving is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(self._serving, 10)
            self._server = None
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
