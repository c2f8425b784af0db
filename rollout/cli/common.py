"""What every ``agentenvs`` command shares: consoles, exit codes, key=value parsing, and
the one place that turns a user's mistake into one line on stderr.

Bad input (an unknown environment, a config key it does not accept, a file that is
not a trajectory store, a policy server that does not answer) ends with one line
on stderr and a non-zero exit, never a traceback: the person typing the command
made a mistake or hit an outage, and the message should say which.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from agentenvs.envs.errors import AgentEnvsError

EXIT_FAILED_GROUPS = 1
EXIT_BAD_INPUT = 2

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class CLIError(AgentEnvsError):
    """A problem the user can fix; printed as one line, exit code 2."""


# ---- parsing key=value options -------------------------------------------------------------


def parse_value(text: str) -> Any:
    """JSON where it parses (numbers, booleans, null, lists, objects), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_assignments(items: Sequence[str], option: str) -> dict[str, Any]:
    """``["limits.max_turns=5", "renderer=chat"]`` -> ``{"limits": {"max_turns": 5}, ...}``."""
    result: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CLIError(f"{option} expects key=value, got {item!r}")
        parts = key.split(".")
        if any(not p for p in parts):
            raise CLIError(f"{option}: bad key {key!r}")
        node = result
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                prefix = ".".join(parts[: depth + 1])
                raise CLIError(f"{option}: {key!r} conflicts with {prefix}={child!r}")
            node = child
        value = parse_value(raw)
        existing = node.get(parts[-1])
        if isinstance(existing, dict) and isinstance(value, dict):
            existing.update(value)
        elif isinstance(existing, dict):
            raise CLIError(f"{option}: {key}={raw!r} conflicts with the nested keys under {key}")
        else:
            node[parts[-1]] = value
    return result


# ---- error handling ---------------------------------------------------------------------------


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    from rich.markup import escape

    err.print(f"[bold red]error:[/bold red] {escape(message)}", markup=True, highlight=False)
    return typer.Exit(code)


@contextmanager
def friendly_errors(*, debug: bool = False) -> Iterator[None]:
    """Turn the errors a user can cause into one line and exit code 2; with ``debug``
    (``--debug``), print each one's traceback first."""
    from agentenvs.envs.registry import EnvConfigError, UnknownEnvError
    from agentenvs.rollout.collect.options import OptionError
    from agentenvs.rollout.collect.run_identity import RunMismatchError
    from agentenvs.rollout.collect.store import StoreError
    from agentenvs.rollout.inspect.viewer import ViewerError
    from agentenvs.rollout.policies.base import PolicyError

    known = (CLIError, EnvConfigError, UnknownEnvError, ViewerError, PolicyError, StoreError)
    try:
        yield
    except (*known, RunMismatchError, OptionError, OSError) as error:
        if debug:
            import traceback

            err.print("".join(traceback.format_exception(error)).rstrip(), markup=False)
        if isinstance(error, OSError):
            raise fail(_os_error_message(error)) from None
        if isinstance(error, OptionError):  # a setting out of range, said as its flag
            raise fail(error.as_flag()) from None
        raise fail(str(error)) from None


def _os_error_message(error: OSError) -> str:
    if isinstance(error, FileNotFoundError):
        return str(error) if error.filename is None else f"{error.filename}: no such file"
    where = f"{error.filename}: " if error.filename else ""
    return f"{where}{error.strerror or error}"


def one_line(text: str) -> str:
    return " ".join(str(text).split())


# ---- tokenizers ---------------------------------------------------------------------------------


def load_tokenizer_or_fail(spec: str) -> Any:
    from agentenvs.rollout.tokenizer import load_tokenizer

    local = Path(spec).expanduser()
    if spec.startswith(("/", ".", "~")) and not local.exists():
        # Clearly a path: do not let transformers take it for a Hub id and go online.
        raise CLIError(f"cannot load tokenizer {spec!r}: no such directory")
    try:
        return load_tokenizer(spec)
    except Exception as error:  # transformers raises OSError, ValueError, ...
        raise CLIError(f"cannot load tokenizer {spec!r}: {one_line(str(error))[:300]}") from None


def load_view_tokenizer(records: list, requested: str | None) -> tuple[Any, str]:
    """The tokenizer ``view`` and ``check`` decode with: ``--tokenizer``, else the one
    the file names. A file that names none is refused with a request for
    ``--tokenizer``: decoding with the builtin tokenizer by default showed garbage
    (and failed sound stores) for runs made with another vocabulary."""
    from agentenvs.rollout.inspect.viewer import tokenizer_spec_for

    decoded = any(r.group is not None for r in records)  # only failed groups: no tokens
    if requested is None and decoded and not any(names_tokenizer(r.provenance) for r in records):
        raise CLIError(NO_TOKENIZER_NAMED)
    spec, fingerprint = tokenizer_spec_for(records, requested)
    try:
        tokenizer = load_tokenizer_or_fail(spec)
    except CLIError:
        if requested:
            raise
        raise CLIError(
            f"the file names tokenizer {spec!r}, which cannot be loaded here; "
            "pass --tokenizer builtin or a local tokenizer directory"
        ) from None
    expected = (fingerprint or {}).get("vocab_sha256")
    if expected:
        from agentenvs.envs.tokenizer_fingerprint import tokenizer_fingerprint

        actual = tokenizer_fingerprint(tokenizer).get("vocab_sha256")
        if actual != expected:
            err.print(
                f"warning: the file was made with a different tokenizer (vocab {expected}, "
                f"{spec!r} has {actual}); decoded text may be wrong",
                markup=False,
            )
    return tokenizer, spec


NO_TOKENIZER_NAMED = (
    "the file names no tokenizer (written before its provenance was recorded, or from "
    "groups whose builders describe none): pass --tokenizer builtin or the local tokenizer "
    "directory the run used"
)
"""What ``view`` and ``check`` say of a store with tokens that names no tokenizer."""


def names_tokenizer(provenance: dict[str, Any]) -> bool:
    """Whether a record's provenance says which tokenizer made it (how to load it, or
    its name)."""
    entry = provenance.get("tokenizer")
    if isinstance(entry, dict):
        return bool(entry.get("spec") or entry.get("name"))
    return isinstance(entry, str) and bool(entry)


# ---- reading stores ---------------------------------------------------------------------------


def read_store_warning(path: Path) -> Any:
    """The store's contents; each skipped (torn) line is one ``warning:`` line on stderr."""
    from agentenvs.rollout.collect.store import read_store

    contents = read_store(path, warn=False)
    for line in contents.warnings():
        err.print(f"warning: {line}", markup=False)
    return contents
