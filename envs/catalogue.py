"""What each registered environment is, said without importing it.

The registry (:data:`ENVIRONMENTS`) knows names and entry points from the installed
packages' metadata. What ``agentenvs list`` shows besides (a one-line summary, the
gymnasium id, the presets, the modules it needs) is read off the config class, which
means importing it: the ReTool config alone pulls in the judge and httpx. So the
environments shipped with agentenvs have a card here, written out once, and
``tests/envs/test_catalogue.py`` fails when a card and its class disagree. An entry
point with no card (a plugin, or a shipped name a plugin took over) is described by
importing its config, as before; one that fails to import is described by its error.

Nothing here imports an environment (or pydantic): listing costs what the metadata costs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentenvs.envs.references import Registry, UnknownNameError
from agentenvs.envs.requirements import Requirement, extra, missing, missing_message

if TYPE_CHECKING:
    from agentenvs.envs.config import EnvConfig

ENTRY_POINT_GROUP = "agentenvs.envs"
GYM_NAMESPACE = "agentenvs"


class UnknownEnvError(UnknownNameError):
    """A name no installed package registers; the message lists the registered ones."""


ENVIRONMENTS = Registry("environment", entry_point_group=ENTRY_POINT_GROUP, unknown=UnknownEnvError)
"""Every registered environment: name -> ``"module:ConfigClass"``, from the entry points."""


def gym_id_for(name: str, cls: type[EnvConfig]) -> str:
    """``agentenvs/<GymName>-v<version>`` from the config class's declarations."""
    stem = cls.gym_name or "".join(part.capitalize() for part in name.split("_"))
    return f"{GYM_NAMESPACE}/{stem}-v{cls.version}"


@dataclass(frozen=True)
class EnvCard:
    """One registered environment as ``agentenvs list`` shows it."""

    name: str
    reference: str
    """Its entry point, ``"module:ConfigClass"``."""
    gym_id: str = ""
    summary: str = ""
    """The first line of the config class's docstring."""
    presets: tuple[str, ...] = ()
    requires: tuple[Requirement, ...] = ()
    """What its episodes import beyond the core (``EnvConfig.requires``)."""
    problem: str | None = None
    """Why its config could not be imported (a broken plugin), else None."""
    missing: tuple[Requirement, ...] = field(default=(), compare=False)
    """The part of :attr:`requires` not installed here (filled by :func:`env_card`)."""

    @property
    def available(self) -> bool:
        return self.problem is None and not self.missing

    def why_unavailable(self) -> str | None:
        if self.problem is not None:
            return self.problem
        return missing_message(self.name, list(self.missing)) if self.missing else None

    @classmethod
    def of(cls, name: str, reference: str, config: type[EnvConfig]) -> EnvCard:
        """The card of a loaded config class."""
        doc = (config.__doc__ or "").strip().splitlines()
        return cls(name, reference, gym_id_for(name, config), doc[0] if doc else "",
                   tuple(sorted(config.presets)), tuple(config.requires))  # fmt: skip


SHIPPED: dict[str, EnvCard] = {
    card.name: card
    for card in (
        EnvCard(
            "guess_number",
            "agentenvs.envs.guess_number:GuessNumberConfig",
            "agentenvs/GuessNumber-v0",
            "Guess a hidden integer; the environment answers higher or lower.",
        ),
        EnvCard(
            "search_r1",
            "agentenvs.envs.search_r1.config:SearchR1Config",
            "agentenvs/SearchR1-v0",
            "Search-R1: reason, search a corpus, answer (exact-match reward).",
            ("search_r1",),
            extra("search", "bm25s", "Stemmer"),
        ),
        EnvCard(
            "retool",
            "agentenvs.envs.retool.config:ReToolConfig",
            "agentenvs/ReTool-v0",
            "Math with a sandboxed Python interpreter (ReTool); answers graded in \\boxed{}.",
            ("verl_retool",),
            extra("retool", "math_verify"),
        ),
        EnvCard(
            "alfworld",
            "agentenvs.envs.alfworld.config:ALFWorldConfig",
            "agentenvs/ALFWorld-v0",
            "ALFWorld: find, take, clean/heat/cool and place objects in a text house.",
            ("gigpo",),
            extra("alfworld", "alfworld", "textworld"),
        ),
        EnvCard(
            "openenv",
            "agentenvs.envs.openenv.config:OpenEnvConfig",
            "agentenvs/OpenEnv-v0",
            "Any OpenEnv environment server (its WebSocket session), played as a text task.",
            requires=extra("openenv", "openenv"),
        ),
        EnvCard(
            "mcp_tools",
            "agentenvs.envs.mcp.task:MCPToolsConfig",
            "agentenvs/MCPTools-v0",
            "Questions answered with tools from MCP servers (stdio or streamable HTTP).",
            requires=extra("mcp", "mcp"),
        ),
        EnvCard(
            "ors",
            "agentenvs.envs.ors.config:ORSConfig",
            "agentenvs/ORS-v0",
            "Any ORS environment (its sessions and tools), played by a tool-calling model.",
            requires=extra("ors", "aiohttp", "openreward"),
        ),
        EnvCard(
            "harbor",
            "agentenvs.envs.harbor.config:HarborConfig",
            "agentenvs/Harbor-v0",
            "Harbor-format tasks, solved with shell commands and scored by their own tests.",
        ),
        EnvCard(
            "harness",
            "agentenvs.envs.harness.config:HarnessConfig",
            "agentenvs/Harness-v1",
            "An agent CLI works on a task in a jail, its model calls captured by a gateway.",
            requires=extra("gateway", "starlette", "uvicorn"),
        ),
        EnvCard(
            "charts",
            "agentenvs.envs.charts.config:ChartsConfig",
            "agentenvs/Charts-v0",
            "Bar-chart questions answered by zooming in: images in the prompt and from a tool.",
            requires=extra("vision", "PIL"),
        ),
    )
}
"""The cards of the environments agentenvs ships, by name (checked against the classes)."""


def env_card(name: str, reference: str | None = None) -> EnvCard:
    """The card of a registered environment, with what it lacks here; a shipped card
    when the name's entry point (``reference``, looked up when not given) is still
    ours, otherwise its config is imported."""
    reference = reference or ENVIRONMENTS.reference(name)
    card = SHIPPED.get(name)
    if card is None or card.reference != reference:
        try:
            card = EnvCard.of(name, reference, load_config_class(name))
        except Exception as error:  # a broken plugin is described by its error
            problem = " ".join(f"{type(error).__name__}: {error}".split())
            return EnvCard(name, reference, problem=problem)
    return dataclasses.replace(card, missing=tuple(missing(card.requires)))


def env_cards() -> list[EnvCard]:
    """Every registered environment's card, by name."""
    return [env_card(name, ref) for name, ref in ENVIRONMENTS.references().items()]  # one scan


def load_config_class(name: str) -> type[EnvConfig]:
    """The config class ``name``'s entry point names, imported now; a
    :class:`TypeError` if it is not an :class:`~agentenvs.envs.config.EnvConfig`."""
    from agentenvs.envs.config import EnvConfig

    loaded = ENVIRONMENTS.load(name)
    if not (isinstance(loaded, type) and issubclass(loaded, EnvConfig)):
        raise TypeError(
            f"entry point {name!r} ({ENVIRONMENTS.reference(name)}) must name an EnvConfig subclass"
        )
    return loaded
