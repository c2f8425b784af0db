"""How each agent harness is started against its gateway session, offline.

Every harness gets a local base URL (the relay inside its jail, which leads to its
episode's gateway session), a dummy key, and every switch its makers document for
telemetry, error reports and update checks turned off; there is no network in the
jail anyway, so what is not switched off fails fast instead of phoning home.

The harnesses themselves are installed by ``make harnesses`` under one folder
(``.harnesses``: a Python venv for mini-swe-agent, an npm prefix with a Node 22 for the
others); :class:`Installed` finds them there. docs/harnesses/ has a page per harness.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.harness.jail import APP, HOME, RELAY_PORT

BASE_URL = f"http://127.0.0.1:{RELAY_PORT}"
"""The gateway as the harness sees it, inside its jail."""
DUMMY_KEY = "sk-agentenvs-offline"
HARNESSES_VAR = "AGENTENVS_HARNESSES"


class HarnessNotInstalled(AgentEnvsError, RuntimeError):
    """The harness is not where ``make harnesses`` puts it."""


@dataclass(frozen=True)
class Installed:
    """Where ``make harnesses`` installed the harnesses."""

    root: Path

    @classmethod
    def find(cls, root: str | Path | None = None) -> Installed:
        """``root``, else ``$AGENTENVS_HARNESSES``, else ``./.harnesses``."""
        return cls(Path(root or os.environ.get(HARNESSES_VAR) or ".harnesses").resolve())

    @property
    def python_bin(self) -> Path:
        return self.root / "python" / "bin"

    @property
    def node_bin(self) -> Path:
        return self.root / "node" / "node_modules" / ".bin"

    def require(self, executable: Path, harness: str) -> Path:
        if not executable.exists():
            raise HarnessNotInstalled(
                f"{harness} is not installed at {executable}: run `make harnesses` "
                f"(or point ${HARNESSES_VAR} at its folder)"
            )
        return executable


@dataclass(frozen=True)
class Launch:
    """What starts one harness run: its command, environment, and files in its home."""

    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    """Paths relative to the jail's home -> contents (config files)."""
    readonly: list[Path] = field(default_factory=list)


@dataclass(frozen=True)
class RunSettings:
    """What every harness run is told."""

    instruction: str
    model: str = "agentenvs"
    max_turns: int = 30


class Harness:
    """One agent CLI: which API it speaks and how it is started."""

    name: str = ""
    api: Literal["openai", "anthropic"] = "openai"

    def launch(self, installed: Installed, run: RunSettings) -> Launch:
        raise NotImplementedError

    @staticmethod
    def path(*folders: Path) -> str:
        return ":".join([*(str(f) for f in folders), "/usr/local/bin", "/usr/bin", "/bin"])


class MiniSweAgent(Harness):
    """mini-swe-agent (PyPI ``mini-swe-agent``): its default ``mini.yaml`` (a ``bash``
    tool), through litellm's OpenAI provider."""

    name = "mini-swe-agent"

    def launch(self, installed: Installed, run: RunSettings) -> Launch:
        mini = installed.require(installed.python_bin / "mini", self.name)
        command = [
            str(mini), "-y", "--exit-immediately", "-t", run.instruction,
            "-m", f"openai/{run.model}", "-c", "mini.yaml",
            "-c", f"model.model_kwargs.api_base={BASE_URL}/v1",
            "-c", f"model.model_kwargs.api_key={DUMMY_KEY}",
            "-c", f"agent.step_limit={run.max_turns}",
            "-o", f"{HOME}/trajectory.json",
        ]  # fmt: skip
        env = {
            "PATH": self.path(installed.python_bin),
            "MSWEA_CONFIGURED": "true",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "MSWEA_SILENT_STARTUP": "1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY": "False",
        }
        return Launch(command, env, readonly=[installed.root / "python"])


class Codex(Harness):
    """OpenAI's Codex CLI (npm ``@openai/codex``): ``codex exec``, a custom model provider on
    the Responses API (the only wire it speaks), Codex's own sandbox off (the jail is the
    sandbox), analytics and update checks off."""

    name = "codex"

    def launch(self, installed: Installed, run: RunSettings) -> Launch:
        codex = installed.require(installed.node_bin / "codex", self.name)
        config = "\n".join(
            [
                f'model = "{run.model}"',
                'model_provider = "agentenvs"',
                'approval_policy = "never"',
                'sandbox_mode = "danger-full-access"',
                "check_for_update_on_startup = false",
                "[model_providers.agentenvs]",
                'name = "agentenvs gateway"',
                f'base_url = "{BASE_URL}/v1"',
                'env_key = "AGENTENVS_API_KEY"',
                'wire_api = "responses"',
                "request_max_retries = 0",
                "stream_max_retries = 0",
                "[analytics]",
                "enabled = false",
                "",
            ]
        )
        command = [
            str(codex), "exec", "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox", run.instruction,
        ]  # fmt: skip
        env = {"PATH": self.path(installed.node_bin), "AGENTENVS_API_KEY": DUMMY_KEY}
        return Launch(command, env, {".codex/config.toml": config}, [installed.root / "node"])


class ClaudeCode(Harness):
    """Anthropic's Claude Code (npm ``@anthropic-ai/claude-code``): ``claude -p`` on the
    Messages API, permissions skipped (the jail is the boundary), telemetry, error
    reports, the auto-updater and other non-essential traffic off."""

    name = "claude-code"
    api = "anthropic"

    def launch(self, installed: Installed, run: RunSettings) -> Launch:
        claude = installed.require(installed.node_bin / "claude", self.name)
        command = [
            str(claude), "-p", run.instruction, "--dangerously-skip-permissions",
            "--model", run.model, "--max-turns", str(run.max_turns), "--output-format", "text",
        ]  # fmt: skip
        env = {
            "PATH": self.path(installed.node_bin),
            "ANTHROPIC_BASE_URL": BASE_URL,
            "ANTHROPIC_API_KEY": DUMMY_KEY,
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_BUG_COMMAND": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        return Launch(command, env, readonly=[installed.root / "node"])


class QwenCode(Harness):
    """Qwen Code (npm ``@qwen-code/qwen-code``): one-shot ``qwen`` in yolo mode on the
    OpenAI Chat Completions API; telemetry, usage statistics and update checks off."""

    name = "qwen-code"

    def launch(self, installed: Installed, run: RunSettings) -> Launch:
        qwen = installed.require(installed.node_bin / "qwen", self.name)
        command = [
            str(qwen), "--auth-type", "openai", "--openai-api-key", DUMMY_KEY,
            "--openai-base-url", f"{BASE_URL}/v1", "-m", run.model, "--yolo",
            "--max-session-turns", str(run.max_turns), run.instruction,
        ]  # fmt: skip
        settings = {
            "telemetry": {"enabled": False},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        }
        files = {".qwen/settings.json": json_text(settings)}
        return Launch(
            command, {"PATH": self.path(installed.node_bin)}, files, [installed.root / "node"]
        )


class OpenCode(Harness):
    """opencode (npm ``opencode-ai``): ``opencode run`` with a provider of its own
    (``@ai-sdk/openai-compatible``, Chat Completions) in its user config; auto-update,
    sharing, model-list fetches and LSP downloads off."""

    name = "opencode"

    def launch(self, installed: Installed, run: RunSettings) -> Launch:
        opencode = installed.require(installed.node_bin / "opencode", self.name)
        config = {
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": False,
            "share": "disabled",
            "provider": {
                "agentenvs": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "agentenvs gateway",
                    "options": {"baseURL": f"{BASE_URL}/v1", "apiKey": DUMMY_KEY},
                    "models": {run.model: {"name": run.model}},
                }
            },
        }
        command = [str(opencode), "run", "-m", f"agentenvs/{run.model}", "--auto", run.instruction]
        env = {"PATH": self.path(installed.node_bin)}
        for switch in ("AUTOUPDATE", "SHARE", "MODELS_FETCH", "LSP_DOWNLOAD", "DEFAULT_PLUGINS"):
            env[f"OPENCODE_DISABLE_{switch}"] = "1"
        files = {".config/opencode/opencode.json": json_text(config)}
        return Launch(command, env, files, [installed.root / "node"])


HARNESSES: Mapping[str, Harness] = {
    h.name: h for h in (MiniSweAgent(), Codex(), ClaudeCode(), OpenCode(), QwenCode())
}


def harness(name: str) -> Harness:
    if name not in HARNESSES:
        raise ValueError(f"unknown harness {name!r}; known: {', '.join(sorted(HARNESSES))}")
    return HARNESSES[name]


def write_files(home: Path, files: Mapping[str, str]) -> None:
    for relative, content in files.items():
        target = home / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)


def json_text(data: object) -> str:
    return json.dumps(data, indent=2) + "\n"


__all__ = ["APP", "BASE_URL", "HARNESSES", "Harness", "Installed", "Launch", "RunSettings"]
