"""``agentenvs gateway``: serve a policy to agent harnesses over the OpenAI and Anthropic APIs.

Every harness episode gets its own session: point the harness's base URL at
``http://HOST:PORT/s/<episode>/v1`` (OpenAI clients) or ``http://HOST:PORT/s/<episode>``
(Anthropic clients), or send ``X-Agentenvs-Session: <episode>``. ``POST
/s/<episode>/finish`` with ``{"reward": R}`` stores the episode in ``--out``; stopping the
gateway stores every open episode. See docs/gateway.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agentenvs.rollout.cli.common import (
    CLIError,
    friendly_errors,
    load_tokenizer_or_fail,
    one_line,
    parse_assignments,
)
from agentenvs.rollout.cli.options import PolicyOpts

FORMATS = ("hermes", "qwen3_coder", "deepseek", "glm45")


def gateway_command(
    policy: Annotated[
        str,
        typer.Option(metavar="NAME", help="The policy that samples: openai (vLLM, SGLang) or hf."),
    ] = "openai",
    policy_opts: PolicyOpts = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            metavar="DIR", help="The model's tokenizer (its chat template renders requests)."
        ),
    ] = None,
    host: Annotated[str, typer.Option(metavar="HOST", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="PORT", help="Port to listen on.")] = 8000,
    out: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Trajectory store finished episodes are written to."),
    ] = None,
    tool_format: Annotated[
        str | None,
        typer.Option(
            metavar="FORMAT",
            help=f"Tool-call format of the template ({', '.join(FORMATS)}); default: told from it.",
        ),
    ] = None,
    model_name: Annotated[
        str, typer.Option(metavar="NAME", help="The model name the APIs report.")
    ] = "agentenvs",
    max_context: Annotated[
        int | None,
        typer.Option(metavar="N", help="Prompt tokens a request may have (more: a context error)."),
    ] = None,
    max_tokens: Annotated[
        int, typer.Option(metavar="N", help="Tokens one turn may sample (a request may ask fewer).")
    ] = 2048,
    debug: Annotated[bool, typer.Option("--debug", help="Tracebacks instead of one line.")] = False,
) -> None:
    """Serve POLICY to agent harnesses: OpenAI Chat Completions and Responses, Anthropic Messages."""
    from agentenvs.envs.tool_calls import CallFormat
    from agentenvs.rollout.collect.executors.spec import PolicySpec
    from agentenvs.rollout.collect.store import TrajectoryStore
    from agentenvs.rollout.collect.store_lock import claim
    from agentenvs.rollout.gateway.policy_gateway import GatewayOptions, PolicyGateway
    from agentenvs.rollout.gateway.serve import run_loop, serve_forever

    with friendly_errors(debug=debug):
        if policy in ("scripted", "replay", "interactive"):
            raise CLIError(
                f"--policy {policy} needs an environment; the gateway serves a model "
                "(--policy openai with --policy-opt url=..., or --policy hf)"
            )
        if tool_format is not None and tool_format not in FORMATS:
            raise CLIError(
                f"--tool-format must be one of {', '.join(FORMATS)}, got {tool_format!r}"
            )
        options = parse_assignments(policy_opts or [], "--policy-opt")
        chosen = PolicySpec(policy, options)
        loaded = load_tokenizer_or_fail(tokenizer or chosen.own_tokenizer() or "builtin")
        options.setdefault("tokenizer", loaded)
        try:
            made = PolicySpec(policy, options).build()
        except (ValueError, TypeError, FileNotFoundError) as error:
            raise CLIError(one_line(str(error))) from None
        settings = GatewayOptions(
            tokenizer=loaded,
            tool_format=CallFormat(tool_format) if tool_format else None,
            model_name=model_name,
            max_context=max_context,
            max_tokens=max_tokens,
            store=TrajectoryStore(out) if out is not None else None,
        )
        try:
            gateway = PolicyGateway(made, settings)  # type: ignore[arg-type]
        except ValueError as error:
            raise CLIError(str(error)) from None
        try:
            with claim(out):  # one run writes a store at a time (StoreBusy: one line)
                run_loop(serve_forever(gateway, host, port))
        except KeyboardInterrupt:
            pass
        except OSError as error:
            raise CLIError(str(error)) from None
