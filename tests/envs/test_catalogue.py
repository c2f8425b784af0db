"""``agentenvs list`` describes the shipped environments from their cards, importing none
of them (issue 46: it imported every config, the ReTool one pulling the judge and httpx,
and took three times ``--help``); each card says what its class says."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

import pytest
from support.paths import REPO

from agentenvs.envs.catalogue import ENVIRONMENTS, SHIPPED, EnvCard, env_card, load_config_class


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_each_shipped_card_says_what_its_class_says(name: str) -> None:
    card = SHIPPED[name]
    assert ENVIRONMENTS.reference(name) == card.reference, "the entry point moved"
    from_class = EnvCard.of(name, card.reference, load_config_class(name))
    assert card == from_class, (
        f"envs/catalogue.py's card of {name!r} is stale: write it as {from_class!r}"
    )


def test_every_shipped_environment_has_a_card() -> None:
    ours = {n for n, ref in ENVIRONMENTS.references().items() if ref.startswith("agentenvs.")}
    assert ours <= set(SHIPPED), f"no card for {sorted(ours - set(SHIPPED))}"


LIST_AND_REPORT = """
import json, sys
from agentenvs.envs.catalogue import ENVIRONMENTS
from agentenvs.rollout.cli.listing import registered_envs
rows = registered_envs()
configs = {ref.partition(":")[0] for ref in ENVIRONMENTS.references().values()}
heavy = configs | {"agentenvs.envs.config", "agentenvs.envs.rewards.judge", "httpx"}
print(json.dumps({"rows": [r.name for r in rows], "loaded": sorted(heavy & set(sys.modules))}))
"""


def test_listing_imports_no_environment() -> None:
    done = subprocess.run([sys.executable, "-c", LIST_AND_REPORT], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report["rows"]) >= set(SHIPPED)
    assert report["loaded"] == [], f"listing imported {report['loaded']}"


def test_a_name_a_plugin_took_over_is_described_from_its_own_class(monkeypatch) -> None:
    """A card describes only the entry point it was written for."""
    monkeypatch.setattr(
        ENVIRONMENTS, "_table", {"retool": "agentenvs.envs.guess_number:GuessNumberConfig"}
    )
    card = env_card("retool")
    assert card.reference == "agentenvs.envs.guess_number:GuessNumberConfig"
    assert card.gym_id == "agentenvs/GuessNumber-v0" and card.requires == ()


README = (REPO / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end]


def test_the_readme_lists_every_shipped_environment_with_its_gym_id() -> None:
    table = _section("Environments")
    for card in SHIPPED.values():
        assert f"| `{card.name}` | `{card.gym_id}` |" in table, f"README lacks {card.name}"


def test_every_extra_is_in_the_readme_and_every_install_names_one() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    setup = _section("Set-up")
    assert [e for e in extras if f"| `{e}` |" not in setup] == [], "README's extras table"
    for card in SHIPPED.values():
        for requirement in card.requires:
            named = requirement.install.removeprefix("agentenvs[").removesuffix("]")
            assert named in extras, f"{card.name}: {requirement.install} is no extra of ours"
