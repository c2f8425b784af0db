"""Policies the collector can drive: scripted, replay, interactive, Hugging Face, OpenAI-compatible.

``make_policy(name, **options)`` builds one by name, which is what the CLI's
``--policy`` uses. Options are validated and coerced (``"0.7"`` becomes a float),
and a bad name or option is a ``ValueError`` that lists what is accepted.
Heavy imports (torch, transformers, httpx) happen only for the policy asked for.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

from agentenvs.envs.references import Registry, UnknownNameError
from agentenvs.rollout.policies.base import Policy, PolicyError, PolicyFactory, policy_for

__all__ = [
    "POLICIES",
    "Policy",
    "PolicyError",
    "PolicyFactory",
    "UnknownPolicyError",
    "check_policy_options",
    "make_policy",
    "policy_for",
]


class UnknownPolicyError(UnknownNameError, ValueError):
    """A policy name that is not registered (a ``ValueError``, as every bad option is)."""


POLICIES = Registry(
    "policy",
    {
        "scripted": "agentenvs.rollout.policies.scripted:ScriptedPolicy",
        "replay": "agentenvs.rollout.policies.replay:ReplayPolicy.from_file",
        "interactive": "agentenvs.rollout.policies.interactive:InteractivePolicy",
        "hf": "agentenvs.rollout.policies.hf:HFPolicy",
        "openai": "agentenvs.rollout.policies.openai_compat:OpenAICompatPolicy",
    },
    unknown=UnknownPolicyError,
)
"""Policy name -> its constructor, loaded when the policy is made."""


def make_policy(name: str, **options: Any) -> Policy | PolicyFactory:
    """A policy by name.

    * ``scripted``: ``variant="oracle"``; the env's own scripted actions.
    * ``replay``: ``path=`` a trajectory file written by the collector.
    * ``interactive``: ``tokenizer=`` (default: the built-in ChatML tokenizer).
    * ``hf``: ``model=`` a local directory; ``tokenizer``, ``temperature``,
      ``top_p``, ``max_tokens``, ``seed``, ``device``, ``dtype``.
    * ``openai``: ``url=``, ``model``, ``api="vllm"|"sglang"``, ``tokenizer``,
      sampling settings, ``timeout``, ``retries``, ``concurrency``; with ``seed``,
      each turn of a rollout gets its own derived, recorded seed; ``trace`` a
      ``RequestTrace`` records when each request was in flight.

    ``hf``, ``openai`` and ``scripted`` also take ``weights_version``, stored with
    each group's provenance so a trainer can tell how stale the samples are (the
    :class:`~.base.VersionedPolicy` capability, declared as a constructor option);
    the others refuse it.
    """
    target, checked = _checked_options(name, options)
    return target(**{key: getattr(checked, key) for key in options})


def check_policy_options(name: str, options: dict[str, Any]) -> None:
    """Raise the ``ValueError`` :func:`make_policy` would for this name and these
    options, without making the policy (the CLI checks before loading a tokenizer)."""
    _checked_options(name, options)


def _checked_options(name: str, options: dict[str, Any]) -> tuple[Any, Any]:
    """The policy's constructor and its options validated and coerced."""
    from pydantic import ValidationError

    target = POLICIES.load(name)
    schema = _options_model(name, target)
    if "weights_version" in options and not _declares_version(target):
        declaring = [n for n in POLICIES.names() if _declares_version(POLICIES.load(n))]
        raise ValueError(
            f"policy {name!r} does not declare weights_version: it samples with no "
            "versioned weights, so no version can be recorded for it; leave weights_version "
            f"out (policies that declare it: {', '.join(declaring)})"
        )
    unknown = sorted(set(options) - set(schema.model_fields))
    if unknown:
        raise ValueError(
            f"unknown option(s) {', '.join(unknown)} for policy {name!r}; "
            f"accepted: {', '.join(schema.model_fields)}"
        )
    try:
        return target, schema(**options)
    except ValidationError as err:
        problems = "; ".join(_problem(e) for e in err.errors())
        raise ValueError(f"bad option for policy {name!r}: {problems}") from None


def _declares_version(target: Any) -> bool:
    """The :class:`~.base.VersionedPolicy` capability, declared as a constructor option."""
    return "weights_version" in inspect.signature(target).parameters


def _problem(error: Any) -> str:
    where = ".".join(str(p) for p in error["loc"]) or "<options>"
    if error["type"] == "missing":
        return f"option {where} is required"
    return f"{where}: {error['msg']}"


def _options_model(name: str, target: Any) -> Any:
    """A pydantic model of the constructor's keyword options, to validate and coerce."""
    from pydantic import ConfigDict, create_model

    function = target.__init__ if inspect.isclass(target) else target
    hints = typing.get_type_hints(function)
    fields: dict[str, Any] = {}
    for param in inspect.signature(target).parameters.values():
        if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints.get(param.name, Any), default)
    config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")
    return create_model(f"{name}_policy_options", __config__=config, **fields)
