"""Every run option of the ``agentenvs`` commands, defined once.

Each option is one ``Annotated`` type below (flag, metavar, help text), used by
every command that takes it (``rollout``, ``eval``, ``serve``, ``view``), so the
same flag says the same thing everywhere. Commands take them in frozen groups
(:mod:`~.flag_groups`) and turn the groups into a
:class:`~agentenvs.rollout.collect.spec.RunSpec` (:mod:`~.run_spec`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

# ---- the options, one definition each -------------------------------------------------------

EnvName = Annotated[
    str, typer.Argument(metavar="ENV", help="Registered environment name (see `agentenvs list`).")
]
PolicyName = Annotated[
    str,
    typer.Option("--policy", metavar="NAME", help="scripted, replay, interactive, hf or openai."),
]
PolicyOpts = Annotated[
    list[str] | None,
    typer.Option(
        "--policy-opt",
        metavar="KEY=VALUE",
        help="Policy option key=value, e.g. url=http://... or model=DIR; temperature, top_p, "
        "max_tokens and seed are the sampling settings.",
    ),
]
RenderTokenizer = Annotated[
    str | None,
    typer.Option(
        "--tokenizer",
        metavar="builtin|DIR",
        help="The tokenizer the envs render with: builtin or a local Hugging Face tokenizer "
        "directory (default: an hf policy's model directory, else builtin).",
    ),
]
DecodeTokenizer = Annotated[
    str | None,
    typer.Option(
        "--tokenizer",
        metavar="builtin|DIR",
        help="The tokenizer to decode with (default: the one the file names).",
    ),
]
Groups = Annotated[
    int, typer.Option("--groups", metavar="N", help="How many groups (tasks) to run.")
]
GroupSize = Annotated[
    int,
    typer.Option(
        "--group-size",
        metavar="G",
        help="Episodes per group: GRPO's G (one per task for a greedy evaluation).",
    ),
]
Split = Annotated[
    str,
    typer.Option(
        "--split", metavar="SPLIT", help="Dataset split (train or test; ReTool also eval)."
    ),
]
Concurrency = Annotated[
    int, typer.Option("--concurrency", metavar="C", help="Groups in flight at once.")
]
Retries = Annotated[
    int, typer.Option("--retries", metavar="R", help="Extra attempts per group, with fresh envs.")
]
GroupTimeout = Annotated[
    float | None,
    typer.Option(
        "--group-timeout", metavar="SECONDS", help="Seconds before a group attempt is abandoned."
    ),
]
OutFile = Annotated[
    Path | None,
    typer.Option(
        "--out",
        metavar="FILE",
        help="Trajectory JSONL; reruns resume. Default: out/<env>.jsonl (eval: "
        "out/<env>-eval-<split>.jsonl).",
    ),
]
NewRun = Annotated[
    bool,
    typer.Option(
        "--new-run",
        help="Append a new run to an --out file made by a different run (otherwise refused).",
    ),
]
Sets = Annotated[
    list[str] | None,
    typer.Option(
        "--set", metavar="KEY=VALUE", help="Env config key=value (JSON values; dotted keys nest)."
    ),
]
Renderer = Annotated[
    str | None,
    typer.Option(
        "--renderer",
        metavar="chat|continuation",
        help="continuation or chat (default: the env's own).",
    ),
]
Sandbox = Annotated[
    str | None,
    typer.Option(
        "--sandbox",
        metavar="BACKEND",
        help="Sandbox backend for envs that run code (local, docker, sandboxfusion); "
        "short for --set sandbox.backend=...",
    ),
]
Url = Annotated[
    str | None,
    typer.Option(
        "--url",
        metavar="URL",
        help="The policy server's URL with --policy openai (--policy-opt url=...); "
        "SandboxFusion's with --sandbox sandboxfusion (sandbox.url).",
    ),
]
EnvServers = Annotated[
    list[str] | None,
    typer.Option(
        "--env-server",
        metavar="URL",
        help="Run the env on `agentenvs serve` servers (repeat or comma-separate to "
        "balance groups over several; docs/env-servers.md).",
    ),
]
EnvServerToken = Annotated[
    str | None,
    typer.Option(
        "--env-server-token",
        metavar="TOKEN",
        help="Bearer token of the env servers ($AGENTENVS_ENV_SERVER_TOKEN).",
    ),
]
Executor = Annotated[
    str,
    typer.Option(
        "--executor",
        metavar="in-process|ray",
        help="Where episodes run: this process, or Ray actors (docs/scale.md).",
    ),
]
RayAddress = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        metavar="auto|HOST:PORT",
        help="Ray cluster to join with --executor ray (default: a local Ray for the run).",
    ),
]
JsonSummary = Annotated[
    bool, typer.Option("--json-summary", help="Print one JSON line instead of the table.")
]
NoProgress = Annotated[bool, typer.Option("--no-progress", help="No progress bar.")]
Debug = Annotated[
    bool,
    typer.Option("--debug", help="Print tracebacks: of the first failed group, and of any error."),
]
Preset = Annotated[
    str | None,
    typer.Option(
        "--preset", metavar="NAME", help="A preset whose config and budget to evaluate with."
    ),
]
Tasks = Annotated[
    int | None,
    typer.Option(
        "--tasks", metavar="N", help="The panel: the split's first N tasks (default: all)."
    ),
]
