"""One ALFWorld episode: task logic over text, played on an engine in a worker process.

:class:`ALFWorldTextEnv` leases an engine from the pool when the episode starts
(``initial_observation``), sends each command to it, and gives the engine back
when it closes. Commands the game does not list right now are answered here with
the engine's own ``Nothing happens.`` (an inadmissible command leaves a PDDL game
unchanged, so asking the engine would give the same answer) and penalised.

:class:`ALFWorldEnv` is the token-level env: a :class:`RenderedEnv` that starts
the game before rendering the prompt and whose scripted oracle may ask the engine
for a fresh plan. :class:`WindowRenderer` implements the sliding-window history:
every observation is a whole new prompt, so every step is its own training sample.
"""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from dataclasses import dataclass, field
from typing import Any, Literal

from agentenvs.envs.alfworld import prompts
from agentenvs.envs.alfworld.actions import (
    ACTION_STOP,
    FORMATS,
    TOOL_CALL_STOP,
    Protocol,
    action_attempts,
    extract_action,
    first_action_lowercased,
    format_action,
    has_cjk,
    has_think,
    match_command,
    normalize,
    reply_tail,
    tool_spec,
)
from agentenvs.envs.alfworld.fork import fork_engine
from agentenvs.envs.alfworld.games import GameInfo
from agentenvs.envs.alfworld.pool import (
    ALFWorldWorkerError,
    EngineError,
    EngineLease,
    EnginePool,
    get_pool,
)
from agentenvs.envs.forking import copy_task_state
from agentenvs.envs.rendered_env import RenderedEnv
from agentenvs.envs.renderers import Appended, Renderer, RendererKind
from agentenvs.envs.text import Message, TextEnv, TextStep
from agentenvs.envs.tool_calls import ToolOutcome, step_logs
from agentenvs.envs.tool_calls.sniff import foreign_attempts
from agentenvs.envs.types import (
    ForkUnsupported,
    SamplerStopReason,
    StopReason,
)

NOTHING_HAPPENS = "Nothing happens."
ANCHOR_LOG = "anchor"
"""Step log: the raw game text the step's action answered (GiGPO's anchor state)."""
ANCHOR_KEY_LOG = "anchor_key"
"""Step log: a stable hash of the anchor, for grouping steps across trajectories."""
INVALID_COMMAND = "fly to the moon"
"""What the ``invalid`` scripted variant sends: well formed, never admissible."""


@dataclass(frozen=True)
class EpisodeSettings:
    """The parts of the config one episode needs (kept small: it travels with the env)."""

    protocol: Protocol = "tag"
    renderer: RendererKind = "chat"
    history: Literal["full", "window"] = "full"
    history_window: int = 2
    show_admissible: bool = True
    success_reward: float = 1.0
    invalid_action_penalty: float = 0.1
    on_env_error: Literal["raise", "end_episode"] = "raise"
    max_turns: int = 50
    reset_timeout_s: float = 180.0
    step_timeout_s: float = 60.0
    workers: int = 2
    engines_per_worker: int = 8
    cache_translations: bool = True
    prompt_layout: Literal["agentenvs", "verl_agent"] = "agentenvs"
    first_prompt_template: str | None = None
    prompt_template: str | None = None
    require_think: bool = False
    reject_cjk: bool = False
    stop_at_action: bool = True
    action_pick: Literal["last", "first"] = "last"
    action_matching: Literal["normalised", "exact"] = "normalised"
    on_no_action: Literal["hint", "send_tail"] = "hint"
    penalise_inadmissible: bool = True
    system_prompt: str | None = None
    texts: dict[str, str] = field(default_factory=dict)
    """The settable strings, resolved (``prompts.STRINGS`` names; ours where unset)."""

    def text(self, name: str) -> str:
        return prompts.STRINGS.text(self.texts, name)

    def pool(self) -> EnginePool:
        return get_pool(self.workers, self.engines_per_worker, self.cache_translations)


@dataclass
class EpisodeStats:
    steps: int = 0
    invalid_actions: int = 0
    invalid_format: int = 0
    won: bool = False
    env_error: str | None = None
    actions: list[str] = field(default_factory=list)


class ALFWorldTextEnv(TextEnv):
    def __init__(self, game: GameInfo, settings: EpisodeSettings) -> None:
        self.game = game
        self.settings = settings
        self.stats = EpisodeStats()
        self.outcome = ToolOutcome.NOT_RUN
        """What became of this step's command (set by ``_step``, recorded by ``step``)."""
        self.lease: EngineLease | None = None
        self.intro = prompts.Intro("", "")
        self.admissible: list[str] = []
        self.history: list[tuple[str, str]] = []
        self.memory: list[tuple[str, str]] = []
        """(raw observation, action played there) per step: the verl_agent window."""
        self.raw_observation = ""
        """The game's last raw text (the first one with its banner): the current anchor."""
        self.first_feedback = ""
        self._plan: list[str] | None = None
        self._plan_fresh = False
        self._oracle_used = False
        self._finalizer: weakref.finalize | None = None
        self._closed = False
        self.engine_commands: list[str] = []
        """Commands the engine played, in order: what a replayed fork re-plays."""
        self.fork_method: str | None = None
        """How this episode was forked from another (``process`` or ``replay``), if it was."""

    # ---- episode start -------------------------------------------------------------
    @property
    def task_type(self) -> str:
        return self.game.task_type

    @property
    def worker_pid(self) -> int | None:
        return self.lease.pid if self.lease is not None else None

    async def start(self) -> None:
        """Lease an engine and reset the game on it. Failures raise (nothing to score)."""
        if self.lease is not None:
            raise RuntimeError("this ALFWorld episode has already started; envs are single-use")
        lease = await self.settings.pool().lease()
        self.lease = lease
        # Give the engine back even if the env is dropped without close().
        self._finalizer = weakref.finalize(self, lease.release)
        try:
            answer = await lease.call(
                "reset", timeout=self.settings.reset_timeout_s, game=self.game.path
            )
        except (ALFWorldWorkerError, EngineError) as err:
            await self.close()
            raise type(err)(f"{err} (while starting {self.game.name})") from None
        self.intro = prompts.split_intro(answer["feedback"])
        self.raw_observation = self.first_feedback = answer["feedback"]
        self.admissible = list(answer["admissible"])
        walkthrough = answer.get("walkthrough")
        self._plan = list(walkthrough) if walkthrough else None
        self._plan_fresh = self._plan is not None

    def initial_messages(self) -> list[Message]:
        if self.lease is None:
            self._start_blocking()
        if self.settings.prompt_layout == "verl_agent":
            template = self.settings.first_prompt_template or prompts.FIRST_TEMPLATE
            text = prompts.fill_template(
                template, **self._template_fields(self.raw_observation, first=True)
            )
            return [{"role": "user", "content": text}]
        return self._messages(prompts.first_observation(self.intro, self._shown_admissible()))

    def _template_fields(self, observation: str, *, first: bool = False) -> dict[str, object]:
        shown = self._shown_admissible()
        history, shown_steps = ("", 0) if first else prompts.history_lines(
            self.memory, self.settings.history_window
        )  # fmt: skip
        return {
            "task_description": prompts.task_description(self.first_feedback),
            "step_count": len(self.memory),
            "history_length": shown_steps,
            "action_history": history,
            "current_step": len(self.memory) + 1,
            "current_observation": observation,
            "admissible_actions": prompts.quoted_admissible(shown) if shown is not None else "",
        }

    def _start_blocking(self) -> None:
        """Start from synchronous code (the gymnasium wrapper renders the prompt directly).

        The engine pool is not tied to an event loop, so a short-lived loop will do.
        Inside a running loop this would block it: ``await start()`` there instead.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(self.start())
            return
        raise RuntimeError("await start() before initial_messages() inside an event loop")

    def _messages(self, user_text: str) -> list[Message]:
        system = self.settings.system_prompt
        if system is None:
            system = prompts.system_prompt(self.settings.protocol, self.settings.max_turns)
        return [{"role": "system", "content": system}, {"role": "user", "content": user_text}]

    def _shown_admissible(self) -> list[str] | None:
        return self.admissible if self.settings.show_admissible else None

    def stop_sequences(self) -> list[str]:
        if self.settings.protocol == "tool":
            return [TOOL_CALL_STOP]
        return [ACTION_STOP] if self.settings.stop_at_action else []

    def tools(self) -> list[dict[str, Any]] | None:
        if self.settings.protocol != "tool":
            return None
        text = self.settings.text
        return [tool_spec(text("tool_description"), text("tool_action_description"))]

    # ---- one action ------------------------------------------------------------------
    async def step(self, action_text: str, *, stop_reason: SamplerStopReason) -> TextStep:
        anchor = self.raw_observation
        protocol = self.settings.protocol
        pick = "first" if protocol == "tag" and self.settings.action_pick == "first" else "last"
        stopped = stop_reason == "stop"
        attempts, chosen = action_attempts(
            action_text, protocol, stopped_on_sequence=stopped, pick=pick
        )
        self.outcome = ToolOutcome.NOT_RUN
        result = await self._step(action_text)
        if chosen is not None:
            attempts[chosen] = attempts[chosen].with_outcome(self.outcome)
        declared = [FORMATS[protocol]]
        attempts += foreign_attempts(action_text, declared)
        result.logs = {
            **result.logs,
            ANCHOR_LOG: anchor,
            ANCHOR_KEY_LOG: anchor_key(anchor),
            **step_logs(attempts, declared, "<tool_response>" if protocol == "tool" else None),
        }
        return result

    def _read_action(self, text: str) -> tuple[str | None, bool]:
        """The command a reply asks for, and whether the reply is well formed."""
        settings = self.settings
        if settings.protocol == "tag" and settings.action_pick == "first":
            requested = first_action_lowercased(text)
        else:
            requested = extract_action(text, settings.protocol)
        well_formed = requested is not None
        if settings.require_think and not has_think(text):
            well_formed = False
        if settings.reject_cjk and has_cjk(text):
            well_formed = False
        return requested, well_formed

    def _match(self, requested: str) -> str | None:
        if self.settings.action_matching == "exact":
            command = requested.strip().lower()
            return command if command in self.admissible else None
        return match_command(requested, self.admissible)

    async def _step(self, action_text: str) -> TextStep:
        self.stats.steps += 1
        requested, well_formed = self._read_action(action_text)
        if requested is None and self.settings.on_no_action == "send_tail":
            requested = reply_tail(action_text)
        if not well_formed:
            self.stats.invalid_format += 1
        format_penalty = 0.0 if well_formed else -self.settings.invalid_action_penalty
        if requested is None:
            self.stats.invalid_actions += 1
            self.stats.actions.append("")
            return self._answer(
                self.settings.text(
                    "format_hint" if self.settings.protocol == "tag" else "format_hint_tool"
                ),
                reward=-self.settings.invalid_action_penalty,
                metrics={"invalid_action": 1, "invalid_format": 1},
                action_label="(no action)",
            )
        command = self._match(requested)
        played = requested.strip().lower() if self.settings.action_matching == "exact" else None
        if command is None:
            self.stats.invalid_actions += 1
            label = played if played is not None else normalize(requested)
            self.stats.actions.append(label)
            penalise = self.settings.penalise_inadmissible or not well_formed
            self.outcome = ToolOutcome.ERROR  # not a command the game admits
            return self._answer(
                NOTHING_HAPPENS,
                reward=-self.settings.invalid_action_penalty if penalise else 0.0,
                metrics={"invalid_action": 1, "invalid_format": int(not well_formed)},
                action_label=label,
            )

        on_plan = self._plan_fresh and bool(self._plan) and self._plan[0] == command
        want_plan = self._oracle_used and not on_plan
        assert self.lease is not None
        try:
            answer = await self.lease.call(
                "step", timeout=self.settings.step_timeout_s, command=command, plan=want_plan
            )
        except (ALFWorldWorkerError, EngineError) as err:
            self.outcome = ToolOutcome.ERROR
            return await self._env_error(err)
        self.stats.actions.append(command)
        self.engine_commands.append(command)
        self._advance_plan(on_plan, answer.get("plan"))
        self.admissible = list(answer["admissible"])
        feedback = answer["feedback"]
        invalid = feedback.strip() == NOTHING_HAPPENS
        self.outcome = ToolOutcome.ERROR if invalid else ToolOutcome.OK
        if invalid:
            self.stats.invalid_actions += 1
        if answer["won"]:
            self.stats.won = True
            reward = self.settings.success_reward + format_penalty
            return TextStep(
                reward=reward,
                done=True,
                stop_reason=StopReason.COMPLETED,
                metrics={
                    "invalid_action": int(invalid),
                    "invalid_format": int(not well_formed),
                    "won": 1,
                },
                logs={"feedback": feedback},
            )
        penalise = invalid and self.settings.penalise_inadmissible
        return self._answer(
            feedback,
            reward=-self.settings.invalid_action_penalty if penalise else format_penalty,
            metrics={"invalid_action": int(invalid), "invalid_format": int(not well_formed)},
            action_label=command,
        )

    def _answer(
        self, feedback: str, *, reward: float, metrics: dict[str, int], action_label: str
    ) -> TextStep:
        self.history.append((action_label, feedback.strip()))
        self.memory.append((self.raw_observation, action_label))
        self.raw_observation = feedback
        return TextStep(
            observation=self._observation(feedback),
            reward=reward,
            metrics=metrics,
            logs={"feedback": feedback},
        )

    def _observation(self, feedback: str) -> str | Message | list[Message]:
        shown = self._shown_admissible()
        if self.settings.prompt_layout == "verl_agent":
            template = self.settings.prompt_template or prompts.STEP_TEMPLATE
            text = prompts.fill_template(template, **self._template_fields(feedback))
            return [{"role": "user", "content": text}]
        if self.settings.history == "window":
            k = self.settings.history_window
            earlier = self.history[:-1][-k:] if k else []
            last_action = self.history[-1][0] if self.history else ""
            text = prompts.window_observation(
                self.intro, earlier, len(self.history), last_action, feedback, shown
            )
            return self._messages(text)
        text = prompts.step_observation(feedback, shown)
        if self.settings.protocol == "tool":
            return {"role": "tool", "content": text}
        if self.settings.renderer == "continuation":
            return prompts.wrap_continuation(text)
        return text

    async def _env_error(self, err: Exception) -> TextStep:
        message = f"{err} (game {self.game.name}, step {self.stats.steps})"
        self.stats.env_error = message
        await self.close()
        if self.settings.on_env_error == "raise":
            raise type(err)(message) from None
        return TextStep(
            done=True,
            stop_reason=StopReason.ENV_ERROR,
            metrics={"env_error": 1},
            logs={"env_error": message[:2000]},
        )

    # ---- the scripted oracle --------------------------------------------------------
    def _advance_plan(self, on_plan: bool, fresh_plan: list[str] | None) -> None:
        if fresh_plan is not None:
            self._plan, self._plan_fresh = list(fresh_plan), True
        elif on_plan and self._plan:
            self._plan.pop(0)
        else:
            self._plan_fresh = False

    async def prepare_scripted(self, variant: str) -> None:
        """Make sure the oracle's plan matches the game state (asks the planner if not)."""
        if variant != "oracle" or self.lease is None or self._closed:
            return
        self._oracle_used = True
        if self._plan_fresh and self._plan:
            return
        try:
            answer = await self.lease.call("plan", timeout=self.settings.step_timeout_s)
        except (ALFWorldWorkerError, EngineError):
            return  # the next step will meet the same failure and report it
        self._plan, self._plan_fresh = list(answer["plan"]), True

    def scripted_action(self, variant: str = "oracle") -> str | None:
        protocol = self.settings.protocol
        # Under require_think a reply needs its reasoning block to be well formed.
        lead = (
            "<think>The plan says this comes next.</think>" if self.settings.require_think else ""
        )
        if variant == "oracle":
            self._oracle_used = True
            if self._plan_fresh and self._plan:
                return lead + format_action(self._plan[0], protocol)
            return lead + format_action("look", protocol)  # harmless; the step fetches a plan
        if variant == "invalid":
            return lead + format_action(INVALID_COMMAND, protocol)
        if variant == "malformed":
            return "I think I should look around the room first."
        return None

    # ---- fork ----------------------------------------------------------------------------
    async def fork(self) -> ALFWorldTextEnv:
        """A copy of this episode on its own engine, in the same game state.

        The engine's process is forked (``fork.py``: milliseconds, any history length);
        if that fails, a fresh engine replays the played commands and must end with the
        same admissible commands. Either way the copy's engine is its own, released when
        the copy closes.
        """
        if self.lease is None or self._closed:
            raise ForkUnsupported("an ALFWorld episode forks only while its game is running")
        clone = copy_task_state(
            self, shared=(self.game, self.settings, self.lease, self._finalizer)
        )
        try:
            lease: EngineLease = await fork_engine(self.lease, timeout=self.settings.step_timeout_s)
            clone.fork_method = "process"
        except (ALFWorldWorkerError, EngineError, OSError):
            lease = await self._replayed_engine()
            clone.fork_method = "replay"
        clone.lease = lease
        clone._finalizer = weakref.finalize(clone, lease.release)
        return clone

    async def _replayed_engine(self) -> EngineLease:
        """The fallback fork: a pool engine reset to this game and fed the same commands."""
        # Bounded: with every engine of the pool leased, waiting would deadlock the tree.
        lease = await asyncio.wait_for(self.settings.pool().lease(), self.settings.reset_timeout_s)
        try:
            answer = await lease.call(
                "reset", timeout=self.settings.reset_timeout_s, game=self.game.path
            )
            for command in self.engine_commands:
                answer = await lease.call(
                    "step", timeout=self.settings.step_timeout_s, command=command, plan=False
                )
        except BaseException:
            lease.release()
            raise
        if list(answer["admissible"]) != self.admissible:
            lease.release()
            raise ForkUnsupported(
                f"replaying {len(self.engine_commands)} command(s) of {self.game.name} "
                "did not reach the same game state"
            )
        return lease

    # ---- end ---------------------------------------------------------------------------
    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._finalizer is not None:
            self._finalizer()  # releases the lease exactly once

    def episode_metrics(self) -> dict[str, float | int]:
        """Per-episode metrics for the group hook, with per-task-type success."""
        won = int(self.stats.won)
        return {
            "won": won,
            f"won/{self.task_type}": won,
            "steps": self.stats.steps,
            "invalid_actions": self.stats.invalid_actions,
            "invalid_format": self.stats.invalid_format,
            "env_error": int(self.stats.env_error is not None),
        }


def anchor_key(observation: str) -> str:
    """A stable key of an anchor observation: equal texts give equal keys in any process."""
    return hashlib.sha256(observation.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class ALFWorldEnv(RenderedEnv):
    """RenderedEnv with an asynchronous oracle (the game starts in ``TextEnv.start``)."""

    task: ALFWorldTextEnv

    async def scripted_action(  # type: ignore[override]
        self, variant: str = "oracle"
    ) -> tuple[list[int], str] | None:
        await self.task.prepare_scripted(variant)
        return super().scripted_action(variant)


class WindowRenderer(Renderer):
    """Sliding-window history: each observation is a whole prompt, rendered afresh.

    The task returns the full message list for the next turn; the renderer renders
    it from scratch and marks a restart, so the collector starts a new training
    sample at every step (the verl-agent / GiGPO way of training on ALFWorld).
    """

    kind: RendererKind = "chat"

    def append(self, history, tools, action_content, action_marker, observation) -> Appended:
        messages = [observation] if isinstance(observation, dict) else list(observation)
        if isinstance(observation, str):
            messages = [{"role": "user", "content": observation}]
        history[:] = messages
        # Only the system turn is the task's prompt; the rest is game text.
        self.prompt_messages = sum(1 for m in messages if m.get("role") == "system")
        encoded = self.encode_conversation(messages, tools)
        return Appended(encoded.tokens, restart=True, split_controls=encoded.split_controls)
