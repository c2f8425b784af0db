"""What ``agentenvs rollout`` checks before a run starts, so a mistake costs a second,
not a tokenizer load and a round of retried groups.

* the policy's name and options (:func:`check_policy`), before any tokenizer loads;
* which setting ``--url`` means: the policy server's with ``--policy openai``,
  SandboxFusion's with ``--sandbox sandboxfusion`` (:func:`route_url`);
* that each policy server answers at all (:func:`probe_servers`): a dead server
  fails the run in seconds instead of retrying every request of every group;
* that the scripted policy's ``variant`` exists for this environment
  (:func:`check_scripted_variant`), asked of one episode before the run;
* that the modules the environment declares are installed (:func:`check_requirements`),
  naming the ``pip install`` line that brings them.
"""

from __future__ import annotations

import inspect
from typing import Any

from agentenvs.rollout.cli.common import CLIError, one_line

URL_EXAMPLE = "http://127.0.0.1:8000"


def check_policy(name: str, options: dict[str, Any]) -> None:
    """The policy name and options ``make_policy`` would refuse, said as flags."""
    from agentenvs.rollout.policies import check_policy_options

    try:
        check_policy_options(name, options)
    except ValueError as error:
        message = one_line(str(error))
        if message.startswith("unknown policy"):
            raise CLIError(f"--policy: {message}") from None
        hint = "set policy options with --policy-opt KEY=VALUE"
        if name == "openai" and "url" not in options:
            hint = f"pass the server's address: --policy-opt url={URL_EXAMPLE} (or --url)"
        raise CLIError(f"--policy {name}: {message}; {hint}") from None


def check_requirements(config: Any) -> None:
    """Refuse an environment whose declared modules (``EnvConfig.requirements()``) are
    not installed, before a tokenizer loads or a group fails on the missing import."""
    from agentenvs.envs.requirements import missing, missing_message

    gone = missing(config.requirements())
    if gone:
        raise CLIError(missing_message(config.env_name, gone))


def route_url(url: str | None, *, policy: str, sandbox: str | None) -> tuple[list[str], str | None]:
    """``--url`` as (``--set`` assignments for the sandbox, the policy's url option).

    With ``--sandbox sandboxfusion`` it is the sandbox's URL; otherwise, with
    ``--policy openai``, the policy server's; otherwise the sandbox's, as before
    (an env whose config names SandboxFusion itself)."""
    if url is None:
        return [], None
    if sandbox == "sandboxfusion" or policy != "openai":
        return [f"sandbox.url={url}"], None
    return [], url


def server_urls(url: object) -> list[str]:
    """The servers a ``url`` option names: a list, or one string of comma-separated URLs
    (``url=http://a:8000,http://b:8000``), as the policy reads it."""
    items = url if isinstance(url, (list, tuple)) else str(url).split(",")
    return [str(item).strip() for item in items if str(item).strip()]


async def probe_servers(urls: list[str], *, timeout: float = 5.0) -> None:
    """Raise :class:`CLIError` naming each server that does not answer HTTP at all.

    Any HTTP answer counts as alive (a 404 on ``/v1/models`` from SGLang, say); only
    a refused connection or no answer within ``timeout`` seconds fails."""
    import httpx

    dead = []
    async with httpx.AsyncClient(timeout=timeout) as client:
        for url in urls:
            try:
                await client.get(url.rstrip("/") + "/v1/models")
            except httpx.HTTPError as error:
                dead.append(
                    f"{url} ({type(error).__name__}: {one_line(str(error)) or 'no answer'})"
                )
    if dead:
        raise CLIError(
            f"policy server does not answer: {'; '.join(dead)}. Start it, or point "
            f"--policy-opt url=... at one that runs"
        )


async def check_scripted_variant(builder: Any, variant: str) -> None:
    """Refuse a scripted ``variant`` the environment does not offer, asked of one episode
    (``oracle`` is offered by every environment with a scripted policy)."""
    from agentenvs.envs.types import ScriptedActions

    if variant == "oracle":
        return
    envs = list(await builder.make_envs())
    try:
        env = envs[0]
        if not isinstance(env, ScriptedActions):
            raise CLIError(f"--policy scripted: environment {env.label()} has no scripted policy")
        await env.initial_observation()
        answer = env.scripted_action(variant)
        if inspect.isawaitable(answer):
            answer = await answer
        if answer is None:
            raise CLIError(
                f"--policy-opt variant={variant}: environment {env.label()} has no scripted "
                f"variant {variant!r} (every scripted environment offers 'oracle')"
            )
    finally:
        await builder.cleanup()
