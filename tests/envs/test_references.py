"""The one registry helper: references load lazily, unknown names say what is known."""

from __future__ import annotations

import sys

import pytest

from agentenvs.envs.references import (
    BadReferenceError,
    Registry,
    UnknownNameError,
    did_you_mean,
    load_ref,
)
from agentenvs.envs.registry import ENVIRONMENTS, UnknownEnvError
from agentenvs.rollout.policies import POLICIES, UnknownPolicyError, make_policy
from agentenvs.sandbox.factory import BACKENDS, backend_class


def test_a_reference_names_a_module_or_an_attribute_path() -> None:
    import json

    assert load_ref("json") is json
    assert load_ref("json:decoder.JSONDecoder") is json.decoder.JSONDecoder
    with pytest.raises(BadReferenceError, match="has no 'nope'"):
        load_ref("json:nope")
    for bad in ("", ":x", "json:"):
        with pytest.raises(BadReferenceError):
            load_ref(bad)
    with pytest.raises(ModuleNotFoundError):  # a missing dependency stays what it is
        load_ref("no_such_package_x:thing")


def test_names_import_nothing_and_load_imports_one(monkeypatch) -> None:
    import agentenvs.sandbox.backends as backends

    module = "agentenvs.sandbox.backends.sandboxfusion"
    # Unloaded for this test only: the module object other tests imported is put back
    # (a second copy would make their isinstance checks fail).
    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.delattr(backends, "sandboxfusion", raising=False)
    assert "sandboxfusion" in BACKENDS.names()
    assert module not in sys.modules
    assert backend_class("sandboxfusion").__name__ == "SandboxFusionSandbox"
    assert module in sys.modules


def test_an_unknown_name_lists_the_known_and_the_closest() -> None:
    registry = Registry("widget", {"alpha": "json", "beta": "json"})
    with pytest.raises(UnknownNameError) as caught:
        registry.load("alpah")
    assert (
        str(caught.value)
        == "unknown widget 'alpah' (did you mean 'alpha'?); choose one of alpha, beta"
    )
    assert did_you_mean("zzz", ["alpha"]) == ""


@pytest.mark.parametrize(
    ("registry", "name", "error"),
    [
        (ENVIRONMENTS, "guess_numbr", UnknownEnvError),
        (POLICIES, "scriptd", UnknownPolicyError),
        (BACKENDS, "locl", ValueError),
    ],
)
def test_every_registry_speaks_the_same_way(registry: Registry, name: str, error: type) -> None:
    with pytest.raises(error) as caught:
        registry.load(name)
    assert isinstance(caught.value, UnknownNameError)
    assert "did you mean" in str(caught.value)


def test_describe_reports_a_broken_entry_and_keeps_the_others() -> None:
    registry = Registry("widget", {"ok": "json:dumps", "broken": "no_such_package_x:thing"})
    described = {entry.name: entry for entry in registry.describe()}
    assert described["ok"].loadable and described["ok"].summary.startswith("Serialize")
    assert not described["broken"].loadable
    assert "ModuleNotFoundError" in (described["broken"].problem or "")


def test_entry_points_are_read_with_the_table_winning() -> None:
    registry = Registry("environment", {"guess_number": "json"}, entry_point_group="agentenvs.envs")
    references = registry.references()
    assert references["guess_number"] == "json"
    assert references["alfworld"].endswith(":ALFWorldConfig")


def test_make_policy_still_refuses_an_unknown_name_as_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown policy 'gpt'"):
        make_policy("gpt")
